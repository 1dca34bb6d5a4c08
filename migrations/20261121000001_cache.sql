-- The compile cache's database tier (see server/src/store.rs).
--
-- One row per compilation: the readable key components, the metadata the API
-- returns (diagnostics, variants, report, artifact list) and the total size
-- used for eviction (least recently used first, down to the configured cap).
CREATE TABLE compilations (
    key          TEXT PRIMARY KEY,
    components   JSONB NOT NULL,
    metadata     JSONB NOT NULL,
    size_bytes   BIGINT NOT NULL,
    created_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    last_used_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    hits         BIGINT NOT NULL DEFAULT 0
);

CREATE INDEX compilations_last_used_at ON compilations (last_used_at);

-- The bytes of every artifact, with the BLAKE3 hash of those bytes: a read
-- whose bytes do not hash to `content_hash` is a miss, never served.
CREATE TABLE artifacts (
    key          TEXT NOT NULL REFERENCES compilations (key) ON DELETE CASCADE,
    kind         TEXT NOT NULL,
    content_hash TEXT NOT NULL,
    bytes        BYTEA NOT NULL,
    PRIMARY KEY (key, kind)
);
