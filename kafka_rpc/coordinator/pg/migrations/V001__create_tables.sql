-- V001: the Batch Coordinator schema on PostgreSQL (Inkless V1..V27 end state, narrowed the way
-- the SQLite schema's V002 narrowed it). Offsets, sizes and timestamps are BIGINT; timestamps are
-- ms since the epoch; topic ids are UUID (compared as 16 bytes, Kafka's order); object keys are
-- TEXT COLLATE "C" so that key order is code point order, as in Python.
--
-- Concurrency (see postgres.py): every write locks the logs rows it touches with
-- SELECT ... FOR UPDATE ordered by (topic_id, partition), then files rows in file_id order, so
-- concurrent commits from several server processes serialise per partition and cannot deadlock.

-- One row per diskless partition. log_id is a compact surrogate key for batches/producer_state.
CREATE TABLE logs (
    log_id           BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    topic_id         UUID    NOT NULL CHECK (topic_id <> '00000000-0000-0000-0000-000000000000'),
    partition        INTEGER NOT NULL CHECK (partition >= 0),
    topic_name       TEXT    NOT NULL CHECK (length(topic_name) BETWEEN 1 AND 255),
    log_start_offset BIGINT  NOT NULL DEFAULT 0 CHECK (log_start_offset >= 0),
    high_watermark   BIGINT  NOT NULL DEFAULT 0 CHECK (high_watermark >= log_start_offset),
    byte_size        BIGINT  NOT NULL DEFAULT 0 CHECK (byte_size >= 0),  -- sum of live batch sizes
    UNIQUE (topic_id, partition)
) WITH (fillfactor = 70);  -- every commit updates its partitions' rows: room for HOT updates

-- One row per committed object. An object is garbage exactly when no batch references it
-- (batch_count = 0); it is then 'deleting' with the time it was marked.
CREATE TABLE files (
    file_id                   BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    object_key                TEXT COLLATE "C" NOT NULL UNIQUE
                              CHECK (length(object_key) BETWEEN 1 AND 1024),
    format                    SMALLINT NOT NULL DEFAULT 1 CHECK (format BETWEEN 1 AND 3),
    reason                    TEXT     NOT NULL DEFAULT 'produce' CHECK (reason IN ('produce', 'merge')),
    state                     TEXT     NOT NULL CHECK (state IN ('uploaded', 'deleting')),
    uploader_broker_id        INTEGER  NOT NULL,
    committed_at_ms           BIGINT   NOT NULL,
    marked_for_deletion_at_ms BIGINT,
    size                      BIGINT   NOT NULL CHECK (size >= 0),
    batch_count               BIGINT   NOT NULL DEFAULT 0
                              CHECK (batch_count >= 0 AND (state = 'uploaded' OR batch_count = 0)),
    CHECK ((state = 'deleting') = (marked_for_deletion_at_ms IS NOT NULL))
) WITH (fillfactor = 90);

-- Soft-deleted objects, in key order (getFilesToDelete pages by key, filters by mark time).
CREATE INDEX files_deleting_by_key ON files (object_key, marked_for_deletion_at_ms)
    WHERE state = 'deleting';

-- batch_id: commit order, never reused (a sequence; a rolled-back commit leaves a gap).
CREATE SEQUENCE batch_id_seq AS BIGINT;

-- One row per committed batch; offsets are the assigned absolute offsets, both inclusive.
-- Keyed by (log_id, last_offset): every batch query filters on log_id and orders by last_offset.
-- No foreign keys (as SQLite's V002): the coordinator keeps files.batch_count exact in the same
-- transaction as the batch inserts/deletes, and deletes a topic's batches with its logs rows.
CREATE TABLE batches (
    log_id               BIGINT   NOT NULL,
    last_offset          BIGINT   NOT NULL,
    base_offset          BIGINT   NOT NULL CHECK (base_offset >= 0),
    batch_id             BIGINT   NOT NULL DEFAULT nextval('batch_id_seq'),
    file_id              BIGINT   NOT NULL,
    byte_offset          BIGINT   NOT NULL CHECK (byte_offset >= 0),
    byte_size            BIGINT   NOT NULL CHECK (byte_size > 0),
    magic                SMALLINT NOT NULL CHECK (magic BETWEEN 0 AND 2),
    timestamp_type       SMALLINT NOT NULL CHECK (timestamp_type BETWEEN -1 AND 1),
    log_append_timestamp BIGINT   NOT NULL,
    batch_max_timestamp  BIGINT   NOT NULL CHECK (batch_max_timestamp >= -1),
    producer_id          BIGINT   NOT NULL CHECK (producer_id >= -1),
    producer_epoch       INTEGER  NOT NULL CHECK (producer_epoch >= -1),
    base_sequence        INTEGER  NOT NULL CHECK (base_sequence >= -1),
    last_sequence        INTEGER  NOT NULL CHECK (last_sequence >= -1),
    PRIMARY KEY (log_id, last_offset),
    CHECK (last_offset >= base_offset)
);
ALTER SEQUENCE batch_id_seq OWNED BY batches.batch_id;

-- Idempotent producer state: the newest 5 accepted batches per (log, producer), spanning epochs.
-- row_id gives the insertion order (inserted only under the log's row lock).
CREATE TABLE producer_state (
    row_id          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    log_id          BIGINT  NOT NULL,
    producer_id     BIGINT  NOT NULL CHECK (producer_id >= 0),
    producer_epoch  INTEGER NOT NULL CHECK (producer_epoch >= 0),
    base_sequence   INTEGER NOT NULL CHECK (base_sequence >= 0),
    last_sequence   INTEGER NOT NULL CHECK (last_sequence >= 0),
    assigned_offset BIGINT  NOT NULL CHECK (assigned_offset >= 0),
    batch_timestamp BIGINT  NOT NULL,                          -- effective timestamp of the batch
    committed_at_ms BIGINT  NOT NULL
);

CREATE INDEX producer_state_by_producer ON producer_state (log_id, producer_id, row_id);
