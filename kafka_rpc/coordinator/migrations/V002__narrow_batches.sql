-- V002: a narrower batches table, for commit throughput (every CommitBatches inserts ~100 rows).
--
-- * batches becomes WITHOUT ROWID with PRIMARY KEY (log_id, last_offset): the table is its own
--   (log_id, last_offset) index, so an insert updates one b-tree instead of three (rowid table,
--   UNIQUE (log_id, last_offset), batches_by_file). Every batch query filters on log_id and
--   orders by last_offset, so each one now reads the table directly.
-- * batch_id (commit order, never reused) stays, as a plain column: the coordinator assigns it
--   from batch_id_seq.next_batch_id, seeded here from V001's AUTOINCREMENT counter.
-- * The batches_by_file index and the batches.file_id foreign key go. Instead each file counts
--   its live batches (files.batch_count), maintained by the coordinator in the same transaction
--   as the batch inserts/deletes. A file can be 'deleting' only with no live batch (CHECK), and
--   only 'deleting' files are ever deleted, so no batch can point at a deleted file.
-- Existing rows are carried over unchanged.

CREATE TABLE batch_id_seq (
    only_row      INTEGER PRIMARY KEY CHECK (only_row = 1),
    next_batch_id INTEGER NOT NULL CHECK (next_batch_id >= 1)
) STRICT;

-- AUTOINCREMENT's counter is the largest batch_id ever used (deleted batches included).
INSERT INTO batch_id_seq (only_row, next_batch_id)
VALUES (1, max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'batches'), 0),
               coalesce((SELECT max(batch_id) FROM batches), 0)) + 1);

CREATE TABLE batches_v2 (
    log_id               INTEGER NOT NULL REFERENCES logs (log_id),
    last_offset          INTEGER NOT NULL,
    base_offset          INTEGER NOT NULL CHECK (base_offset >= 0),
    batch_id             INTEGER NOT NULL CHECK (batch_id >= 1),   -- commit order, never reused
    file_id              INTEGER NOT NULL,                         -- counted in files.batch_count
    byte_offset          INTEGER NOT NULL CHECK (byte_offset >= 0),
    byte_size            INTEGER NOT NULL CHECK (byte_size > 0),
    magic                INTEGER NOT NULL CHECK (magic BETWEEN 0 AND 2),
    timestamp_type       INTEGER NOT NULL CHECK (timestamp_type BETWEEN -1 AND 1),
    log_append_timestamp INTEGER NOT NULL,
    batch_max_timestamp  INTEGER NOT NULL CHECK (batch_max_timestamp >= -1),
    producer_id          INTEGER NOT NULL CHECK (producer_id >= -1),
    producer_epoch       INTEGER NOT NULL CHECK (producer_epoch >= -1),
    base_sequence        INTEGER NOT NULL CHECK (base_sequence >= -1),
    last_sequence        INTEGER NOT NULL CHECK (last_sequence >= -1),
    -- findBatches / deleteRecords / retention: WHERE log_id = ? AND last_offset >= ? / < ?,
    -- ORDER BY last_offset (offsets never overlap within a log, hence a key).
    PRIMARY KEY (log_id, last_offset),
    CHECK (last_offset >= base_offset)
) STRICT, WITHOUT ROWID;

INSERT INTO batches_v2 (log_id, last_offset, base_offset, batch_id, file_id, byte_offset,
                        byte_size, magic, timestamp_type, log_append_timestamp,
                        batch_max_timestamp, producer_id, producer_epoch, base_sequence,
                        last_sequence)
SELECT log_id, last_offset, base_offset, batch_id, file_id, byte_offset, byte_size, magic,
       timestamp_type, log_append_timestamp, batch_max_timestamp, producer_id, producer_epoch,
       base_sequence, last_sequence
FROM batches;

DROP TABLE batches;   -- with batches_by_log_last_offset and batches_by_file

ALTER TABLE batches_v2 RENAME TO batches;

-- Live batches of each object; 'deleting' (garbage) only at 0.
ALTER TABLE files ADD COLUMN batch_count INTEGER NOT NULL DEFAULT 0
    CHECK (batch_count >= 0 AND (state = 'uploaded' OR batch_count = 0));

UPDATE files SET batch_count = c.n
FROM (SELECT file_id, count(*) AS n FROM batches GROUP BY file_id) AS c
WHERE files.file_id = c.file_id;
