/*
 * Element-type classes, after the SaC Stdlib's builtin.mac: each applies
 * F(type, zero, one, min, max) to its member types.
 */
#define SIGNED_INT(F) \
  F(byte, 0b, 1b, -128b, 127b) \
  F(short, 0s, 1s, -32768s, 32767s) \
  F(int, 0, 1, -2147483648, 2147483647) \
  F(long, 0l, 1l, -9223372036854775808l, 9223372036854775807l) \
  F(longlong, 0ll, 1ll, -9223372036854775808ll, 9223372036854775807ll)
#define UNSIGNED_INT(F) \
  F(ubyte, 0ub, 1ub, 0ub, 255ub) \
  F(ushort, 0us, 1us, 0us, 65535us) \
  F(uint, 0ui, 1ui, 0ui, 4294967295ui) \
  F(ulong, 0ul, 1ul, 0ul, 18446744073709551615ul) \
  F(ulonglong, 0ull, 1ull, 0ull, 18446744073709551615ull)
#define INT_NUM(F) SIGNED_INT(F) UNSIGNED_INT(F)
#define REAL_NUM(F) \
  F(float, 0.0f, 1.0f, -3.40282347e38f, 3.40282347e38f) \
  F(double, 0.0, 1.0, -1.7976931348623157e308, 1.7976931348623157e308)
#define NUM(F) INT_NUM(F) REAL_NUM(F)
#define SIGNED_NUM(F) SIGNED_INT(F) REAL_NUM(F)
#define BOOL(F) F(bool, false, true, false, true)
#define CHAR(F) F(char, ' ', ' ', '\0', '\xff')
#define BUILT_IN(F) NUM(F) BOOL(F) CHAR(F)
