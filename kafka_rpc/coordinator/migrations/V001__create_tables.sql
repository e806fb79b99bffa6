-- V001: the Batch Coordinator schema (Inkless V1..V27 end state, adapted to SQLite).
-- Integers are INTEGER (64-bit); timestamps are ms since the epoch; topic ids are 16-byte BLOBs.
-- Domains of Inkless (offset_t, byte_size_t, producer_epoch_t, ...) become CHECK constraints.

-- One row per diskless partition. log_id is a compact surrogate key for batches/producer_state.
CREATE TABLE logs (
    log_id           INTEGER PRIMARY KEY AUTOINCREMENT,
    topic_id         BLOB    NOT NULL CHECK (length(topic_id) = 16 AND topic_id <> zeroblob(16)),
    partition        INTEGER NOT NULL CHECK (partition >= 0),
    topic_name       TEXT    NOT NULL CHECK (length(topic_name) BETWEEN 1 AND 255),
    log_start_offset INTEGER NOT NULL DEFAULT 0 CHECK (log_start_offset >= 0),
    high_watermark   INTEGER NOT NULL DEFAULT 0 CHECK (high_watermark >= log_start_offset),
    byte_size        INTEGER NOT NULL DEFAULT 0 CHECK (byte_size >= 0),   -- sum of live batch sizes
    UNIQUE (topic_id, partition)
) STRICT;

-- One row per committed object. An object is garbage exactly when no batch references it;
-- it is then 'deleting' with the time it was marked.
CREATE TABLE files (
    file_id                   INTEGER PRIMARY KEY AUTOINCREMENT,
    object_key                TEXT    NOT NULL UNIQUE CHECK (length(object_key) BETWEEN 1 AND 1024),
    format                    INTEGER NOT NULL DEFAULT 1 CHECK (format BETWEEN 1 AND 3),
    reason                    TEXT    NOT NULL DEFAULT 'produce' CHECK (reason IN ('produce', 'merge')),
    state                     TEXT    NOT NULL CHECK (state IN ('uploaded', 'deleting')),
    uploader_broker_id        INTEGER NOT NULL,
    committed_at_ms           INTEGER NOT NULL,
    marked_for_deletion_at_ms INTEGER,
    size                      INTEGER NOT NULL CHECK (size >= 0),
    CHECK ((state = 'deleting') = (marked_for_deletion_at_ms IS NOT NULL))
) STRICT;

-- Soft-deleted objects, in key order (getFilesToDelete pages by key, filters by mark time).
CREATE INDEX files_deleting_by_key ON files (object_key, marked_for_deletion_at_ms)
    WHERE state = 'deleting';

-- One row per committed batch; offsets are the assigned absolute offsets, both inclusive.
CREATE TABLE batches (
    batch_id             INTEGER PRIMARY KEY AUTOINCREMENT,   -- commit order, never reused
    log_id               INTEGER NOT NULL REFERENCES logs (log_id),
    base_offset          INTEGER NOT NULL CHECK (base_offset >= 0),
    last_offset          INTEGER NOT NULL CHECK (last_offset >= base_offset),
    file_id              INTEGER NOT NULL REFERENCES files (file_id) ON DELETE RESTRICT,
    byte_offset          INTEGER NOT NULL CHECK (byte_offset >= 0),
    byte_size            INTEGER NOT NULL CHECK (byte_size > 0),
    magic                INTEGER NOT NULL CHECK (magic BETWEEN 0 AND 2),
    timestamp_type       INTEGER NOT NULL CHECK (timestamp_type BETWEEN -1 AND 1),
    log_append_timestamp INTEGER NOT NULL,
    batch_max_timestamp  INTEGER NOT NULL CHECK (batch_max_timestamp >= -1),
    producer_id          INTEGER NOT NULL CHECK (producer_id >= -1),
    producer_epoch       INTEGER NOT NULL CHECK (producer_epoch >= -1),
    base_sequence        INTEGER NOT NULL CHECK (base_sequence >= -1),
    last_sequence        INTEGER NOT NULL CHECK (last_sequence >= -1)
) STRICT;

-- findBatches / deleteRecords / retention: WHERE log_id = ? AND last_offset >= ? / < ?,
-- ORDER BY last_offset (offsets never overlap within a log, hence UNIQUE).
CREATE UNIQUE INDEX batches_by_log_last_offset ON batches (log_id, last_offset);
-- object reference check ("does any batch still point at this file?") and the FK.
CREATE INDEX batches_by_file ON batches (file_id);

-- Idempotent producer state: the newest 5 accepted batches per (log, producer), spanning epochs.
CREATE TABLE producer_state (
    row_id          INTEGER PRIMARY KEY,                      -- insertion order
    log_id          INTEGER NOT NULL REFERENCES logs (log_id),
    producer_id     INTEGER NOT NULL CHECK (producer_id >= 0),
    producer_epoch  INTEGER NOT NULL CHECK (producer_epoch >= 0),
    base_sequence   INTEGER NOT NULL CHECK (base_sequence >= 0),
    last_sequence   INTEGER NOT NULL CHECK (last_sequence >= 0),
    assigned_offset INTEGER NOT NULL CHECK (assigned_offset >= 0),
    batch_timestamp INTEGER NOT NULL,                          -- effective timestamp of the batch
    committed_at_ms INTEGER NOT NULL
) STRICT;

CREATE INDEX producer_state_by_producer ON producer_state (log_id, producer_id, row_id);
