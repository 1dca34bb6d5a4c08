//! The registry of diagnostic codes. `docs/errors.md` documents each one; the
//! `error_index_lists_every_code` test fails when the two drift apart.

use super::Code;

macro_rules! codes {
    ($( $name:ident = $id:literal, $title:literal; )*) => {
        $( pub const $name: Code = Code { id: $id, title: $title }; )*
        /// Every code, in registry order.
        pub const ALL_CODES: &[Code] = &[$($name),*];
    };
}

codes! {
    // Lexical structure.
    UNTERMINATED_COMMENT = "E0001", "unterminated block comment";
    UNTERMINATED_STRING = "E0002", "unterminated string literal";
    BAD_CHAR_LITERAL = "E0003", "invalid character literal";
    BAD_NUMBER = "E0004", "invalid numeric literal";
    UNEXPECTED_CHAR = "E0005", "unexpected character";
    BAD_ESCAPE = "E0006", "invalid escape sequence";

    // Preprocessor.
    UNKNOWN_DIRECTIVE = "E0010", "unknown preprocessor directive";
    MALFORMED_DIRECTIVE = "E0011", "malformed preprocessor directive";
    INCLUDE_NOT_FOUND = "E0012", "included file not found";
    UNTERMINATED_CONDITIONAL = "E0013", "#if without #endif";
    UNMATCHED_CONDITIONAL = "E0014", "#else, #elif or #endif without #if";
    MACRO_ARITY = "E0015", "wrong number of macro arguments";
    UNTERMINATED_MACRO_CALL = "E0016", "unterminated macro argument list";
    BAD_PP_EXPRESSION = "E0017", "invalid #if expression";
    ERROR_DIRECTIVE = "E0018", "#error directive";
    INCLUDE_DEPTH = "E0019", "#include nested too deeply";
    WARNING_DIRECTIVE = "W0010", "#warning directive";
    MACRO_REDEFINED = "W0011", "macro redefined";

    // Syntax.
    UNEXPECTED_TOKEN = "E0100", "unexpected token";
    EXPECTED_EXPRESSION = "E0101", "expected an expression";
    EXPECTED_TYPE = "E0102", "expected a type";
    EXPECTED_IDENTIFIER = "E0103", "expected an identifier";
    BAD_ASSIGN_TARGET = "E0104", "invalid assignment target";
    BAD_WITH_LOOP = "E0105", "malformed with-loop";
    BAD_GENERATOR = "E0106", "malformed generator";
    NESTING_TOO_DEEP = "E0107", "program nested too deeply";
    MODARRAY_INDEX_MISMATCH = "E0108", "classic modarray index differs from the generator's";
    BAD_TYPE_PATTERN = "E0109", "malformed type pattern";
    BAD_ITEM = "E0110", "expected a function definition or declaration";
    BAD_TENSOR_COMPREHENSION = "E0111", "malformed tensor comprehension";
    BAD_DOT_SELECTION = "E0112", "malformed dot selection";
    LITERAL_OUT_OF_RANGE = "E0113", "literal out of range for its type";

    // Names, modules and declarations.
    UNKNOWN_VARIABLE = "E0200", "unknown variable";
    UNKNOWN_FUNCTION = "E0201", "unknown function";
    WRONG_ARITY = "E0202", "no instance takes this many arguments";
    POSSIBLY_UNDEFINED = "E0203", "variable may be used before it is defined";
    UNKNOWN_MODULE = "E0204", "unknown module";
    DUPLICATE_DEFINITION = "E0205", "two definitions with the same signature";
    MISSING_RETURN = "E0206", "function does not return on every path";
    DUPLICATE_PARAMETER = "E0207", "parameter name used twice";
    UNKNOWN_TYPE = "E0208", "unknown type name";
    RETURN_COUNT = "E0209", "wrong number of returned values";
    ASSIGN_COUNT = "E0210", "wrong number of values on the left of `=`";
    TYPEDEF_REDEFINED = "E0211", "type name defined twice";
    UNKNOWN_IMPORT = "E0212", "module does not provide this name";
    MISSING_MAIN = "E0213", "no entry function";
    BAD_FOLD_FUNCTION = "E0214", "fold function is not a binary function";
    VOID_VALUE = "E0215", "a function without results used as a value";
    BAD_CONDITION = "E0216", "type-pattern condition uses an unbound name";
    UNUSED_RESULT = "W0201", "value computed and dropped";

    // Types and overloading (compile time).
    NO_INSTANCE = "E0300", "no instance matches the argument types";
    AMBIGUOUS_OVERLOAD = "E0301", "overloaded instances form a crossing pair";
    TYPE_MISMATCH = "E0302", "type mismatch";
    STATIC_SHAPE_ERROR = "E0303", "shapes can never match";
    HINT_MISMATCH = "E0304", "shape hint does not fit the function";
    MIXED_RESULT_TYPES = "E0305", "overloads chosen at run time return different element types";

    // L0: uniqueness types and L0's static rules (seed 004 ch. 3).
    USE_AFTER_CONSUME = "E0400", "value used after it was consumed";
    NOT_UNIQUE = "E0401", "in-place update or unique parameter needs a unique array";
    UNIQUE_RESULT_ALIASES = "E0402", "unique result aliases a non-unique parameter";
    CONSUMED_IN_SEQUENCE = "E0403", "consumed value also used in the same sequence";
    CONSUMED_REPEATEDLY = "E0404", "value consumed where it may be consumed more than once";
    IRREGULAR_LITERAL = "E0405", "array literal with rows of different shapes";
    BAD_STATIC_ARGUMENT = "E0406", "argument must be a constant";

    // Driver options.
    BAD_TARGET = "E0500", "target CPU or feature not known or not usable";

    // Run-time errors (user errors found while running).
    INDEX_OUT_OF_BOUNDS = "R0001", "index out of bounds";
    SHAPE_MISMATCH = "R0002", "shape mismatch";
    DIVISION_BY_ZERO = "R0003", "division by zero";
    NO_MATCHING_INSTANCE = "R0004", "no instance matches the argument types at run time";
    BAD_RESHAPE = "R0005", "reshape to a different number of elements";
    BAD_GENERATOR_VALUE = "R0006", "generator bounds, step or width invalid";
    IRREGULAR_ARRAY = "R0007", "array elements of different shapes";
    RUNTIME_TYPE_MISMATCH = "R0008", "base types differ at run time";
    RECURSION_LIMIT = "R0009", "recursion too deep";
    ALLOCATION_TOO_LARGE = "R0010", "array too large to allocate";
    TYPE_ASSERTION_FAILED = "R0011", "value does not have its declared type";
    UNKNOWN_RESULT_SHAPE = "R0012", "with-loop result shape unknown";
    INVALID_ARGUMENT = "R0013", "invalid argument value";
    CONDITION_FAILED = "R0014", "type-pattern condition does not hold";
    STEP_LIMIT = "R0015", "execution step limit reached";

    // Compiler limitations.
    UNSUPPORTED = "L0001", "language feature not supported by withloop";

    // Compiler bugs.
    INTERNAL_ERROR = "B0001", "internal compiler error";
}
