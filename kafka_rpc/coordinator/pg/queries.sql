-- Statements of the PostgreSQL Batch Coordinator (postgres.py). Sections are named by
-- "-- name: <name>". Writes run inside one READ COMMITTED transaction per call, after locking the
-- logs rows they change with lock_logs (ordered by topic_id, partition: no deadlock between
-- writers) and, for deletions, the files rows they change with lock_files (file_id order).

-- name: insert_file
-- A repeated object key (committed by anyone, or in flight in another transaction, which this
-- waits for) returns no row: the commit is rejected and rolled back.
INSERT INTO files (object_key, state, uploader_broker_id, committed_at_ms, size)
VALUES ($1, 'uploaded', $2, $3, $4)
ON CONFLICT (object_key) DO NOTHING
RETURNING file_id;

-- name: insert_file_lock_logs
-- commit_file's first round trip: insert_file, then (if the key was new) lock_logs for the
-- partitions $5/$6 (array literals). No row: the key is known. Else one row per locked log (or
-- one row with NULL log columns when none is known), each carrying the new file_id.
WITH new_file AS (
    INSERT INTO files (object_key, state, uploader_broker_id, committed_at_ms, size)
    VALUES ($1, 'uploaded', $2, $3, $4)
    ON CONFLICT (object_key) DO NOTHING
    RETURNING file_id
)
SELECT f.file_id, l.log_id, l.ord, l.log_start_offset, l.high_watermark, l.byte_size
FROM new_file AS f
LEFT JOIN (
    SELECT l.log_id, r.ord, l.log_start_offset, l.high_watermark, l.byte_size
    FROM logs AS l
    JOIN unnest($5::text::uuid[], $6::text::integer[]) WITH ORDINALITY AS r (topic_id, partition, ord)
      ON l.topic_id = r.topic_id AND l.partition = r.partition
    ORDER BY l.topic_id, l.partition
    FOR UPDATE OF l
) AS l ON true;

-- name: lock_logs
-- $1/$2: the partitions, ord = their 1-based position in the arrays. Rows are locked in
-- (topic_id, partition) order (LockRows above the Sort) and the newest committed version is read.
SELECT l.log_id, r.ord, l.log_start_offset, l.high_watermark, l.byte_size
FROM logs AS l
JOIN unnest($1::uuid[], $2::integer[]) WITH ORDINALITY AS r (topic_id, partition, ord)
  ON l.topic_id = r.topic_id AND l.partition = r.partition
ORDER BY l.topic_id, l.partition
FOR UPDATE OF l;

-- name: select_producer_states
SELECT p.log_id, p.producer_id, p.row_id, p.producer_epoch, p.base_sequence, p.last_sequence,
       p.assigned_offset, p.batch_timestamp, p.committed_at_ms
FROM producer_state AS p
WHERE (p.log_id, p.producer_id) IN (SELECT * FROM unnest($1::bigint[], $2::bigint[]))
ORDER BY p.log_id, p.producer_id, p.row_id;

-- name: write_commit
-- Every write of one commit_file in one statement (data-modifying CTEs all run to completion).
-- Arrays are passed as text literals ('{1,2,3}'): PostgreSQL parses them faster than asyncpg
-- encodes Python lists element by element.
-- $1 file_id, $2 now (ms), $3..$14 the accepted batches in request order (batch_id is assigned
-- from batch_id_seq in that order), $15..$17 the new heads of the touched logs, $18 the number of
-- accepted batches (0: the object is garbage at once), $19 producer_state rows that left the
-- 5-batch window, $20..$26 the new producer_state rows, oldest first.
WITH new_batches AS (
    INSERT INTO batches (log_id, base_offset, last_offset, file_id, byte_offset, byte_size, magic,
                         timestamp_type, log_append_timestamp, batch_max_timestamp, producer_id,
                         producer_epoch, base_sequence, last_sequence)
    SELECT b.log_id, b.base_offset, b.last_offset, $1::bigint, b.byte_offset, b.byte_size, b.magic,
           b.timestamp_type, $2::bigint, b.batch_max_timestamp, b.producer_id, b.producer_epoch,
           b.base_sequence, b.last_sequence
    FROM unnest($3::text::bigint[], $4::text::bigint[], $5::text::bigint[],
                $6::text::bigint[], $7::text::bigint[], $8::text::smallint[],
                $9::text::smallint[], $10::text::bigint[], $11::text::bigint[],
                $12::text::integer[], $13::text::integer[], $14::text::integer[])
         WITH ORDINALITY AS b (log_id, base_offset, last_offset, byte_offset, byte_size, magic,
                               timestamp_type, batch_max_timestamp, producer_id, producer_epoch,
                               base_sequence, last_sequence, ord)
    ORDER BY b.ord
), heads AS (
    UPDATE logs SET high_watermark = h.high_watermark, byte_size = h.byte_size
    FROM unnest($15::text::bigint[], $16::text::bigint[], $17::text::bigint[]) AS h (log_id, high_watermark, byte_size)
    WHERE logs.log_id = h.log_id
), file AS (
    UPDATE files SET batch_count = $18::bigint,
                     state = CASE WHEN $18::bigint = 0 THEN 'deleting' ELSE 'uploaded' END,
                     marked_for_deletion_at_ms = CASE WHEN $18::bigint = 0 THEN $2::bigint END
    WHERE file_id = $1::bigint
), stale AS (
    DELETE FROM producer_state WHERE row_id = ANY ($19::text::bigint[])
), fresh AS (
    INSERT INTO producer_state (log_id, producer_id, producer_epoch, base_sequence, last_sequence,
                                assigned_offset, batch_timestamp, committed_at_ms)
    SELECT p.log_id, p.producer_id, p.producer_epoch, p.base_sequence, p.last_sequence,
           p.assigned_offset, p.batch_timestamp, $2::bigint
    FROM unnest($20::text::bigint[], $21::text::bigint[], $22::text::integer[], $23::text::integer[], $24::text::integer[],
                $25::text::bigint[], $26::text::bigint[])
         WITH ORDINALITY AS p (log_id, producer_id, producer_epoch, base_sequence, last_sequence,
                               assigned_offset, batch_timestamp, ord)
    ORDER BY p.ord
)
SELECT 1;

-- name: insert_logs
INSERT INTO logs (topic_id, partition, topic_name)
SELECT $1::uuid, g, $2::text FROM generate_series(0, $3::integer - 1) AS g
ON CONFLICT (topic_id, partition) DO NOTHING;

-- name: select_log
SELECT log_id, log_start_offset, high_watermark, byte_size
FROM logs WHERE topic_id = $1 AND partition = $2;

-- name: lock_files
SELECT file_id FROM files WHERE file_id = ANY ($1::bigint[]) ORDER BY file_id FOR UPDATE;

-- name: release_files
-- $2[i] of file $1[i]'s batches were deleted: the file becomes garbage ('deleting', marked at $3)
-- when that was all of them. (Right-hand sides see the row before the update.)
UPDATE files SET batch_count = files.batch_count - r.n,
                 state = CASE WHEN files.batch_count = r.n THEN 'deleting' ELSE files.state END,
                 marked_for_deletion_at_ms = CASE WHEN files.batch_count = r.n THEN $3::bigint
                                                  ELSE files.marked_for_deletion_at_ms END
FROM unnest($1::bigint[], $2::bigint[]) AS r (file_id, n)
WHERE files.file_id = r.file_id;

-- name: delete_batches_below
DELETE FROM batches WHERE log_id = $1 AND last_offset < $2 RETURNING file_id, byte_size;

-- name: update_log_tail
UPDATE logs SET log_start_offset = $2, byte_size = byte_size - $3 WHERE log_id = $1;

-- name: retention_scan
SELECT base_offset, byte_size,
       CASE WHEN timestamp_type = 1 THEN log_append_timestamp ELSE batch_max_timestamp END
FROM batches WHERE log_id = $1 ORDER BY last_offset;

-- name: lock_logs_of_topics
SELECT log_id, topic_id FROM logs WHERE topic_id = ANY ($1::uuid[])
ORDER BY topic_id, partition FOR UPDATE;

-- name: count_batches_by_file
SELECT file_id, count(*) FROM batches WHERE log_id = ANY ($1::bigint[]) GROUP BY file_id;

-- name: delete_logs
WITH b AS (DELETE FROM batches WHERE log_id = ANY ($1::bigint[])),
     p AS (DELETE FROM producer_state WHERE log_id = ANY ($1::bigint[]))
DELETE FROM logs WHERE log_id = ANY ($1::bigint[]);

-- name: delete_deleting_file
DELETE FROM files WHERE object_key = $1 AND state = 'deleting' RETURNING file_id;

-- name: file_exists
SELECT 1 FROM files WHERE object_key = $1;

-- name: find_first
-- The partition's bounds and its first page of batches from offset $3 (none when $3 is out of
-- range or at the HW), in ONE statement: one snapshot without an explicit transaction.
SELECT l.log_id, l.log_start_offset, l.high_watermark, b.batch_id, b.object_key, b.byte_offset,
       b.byte_size, b.base_offset, b.last_offset, b.log_append_timestamp, b.batch_max_timestamp,
       b.timestamp_type, b.magic, b.producer_id, b.producer_epoch, b.base_sequence, b.last_sequence
FROM logs AS l
LEFT JOIN LATERAL (
    SELECT b.*, f.object_key FROM batches AS b JOIN files AS f ON f.file_id = b.file_id
    WHERE b.log_id = l.log_id AND b.last_offset >= $3
      AND $3 >= l.log_start_offset AND $3 < l.high_watermark
    ORDER BY b.last_offset LIMIT $4
) AS b ON true
WHERE l.topic_id = $1 AND l.partition = $2
ORDER BY b.last_offset;

-- name: find_many
-- Several find_first in ONE statement (one snapshot, one round trip): entry $1[i]/$2[i] from
-- offset $3[i], ord = i (1-based). One row per batch of the entry's first page (at most $4), or
-- one row with NULL batch columns when the offset is out of range, at the HW or past the last
-- batch; no row for an unknown partition. Ordered by (ord, last_offset).
SELECT r.ord, l.log_id, l.log_start_offset, l.high_watermark, b.batch_id, b.object_key,
       b.byte_offset, b.byte_size, b.base_offset, b.last_offset, b.log_append_timestamp,
       b.batch_max_timestamp, b.timestamp_type, b.magic, b.producer_id, b.producer_epoch,
       b.base_sequence, b.last_sequence
FROM unnest($1::uuid[], $2::integer[], $3::bigint[]) WITH ORDINALITY AS r (topic_id, partition, off, ord)
JOIN logs AS l ON l.topic_id = r.topic_id AND l.partition = r.partition
LEFT JOIN LATERAL (
    SELECT b.*, f.object_key FROM batches AS b JOIN files AS f ON f.file_id = b.file_id
    WHERE b.log_id = l.log_id AND b.last_offset >= r.off
      AND r.off >= l.log_start_offset AND r.off < l.high_watermark
    ORDER BY b.last_offset LIMIT $4
) AS b ON true
ORDER BY r.ord, b.last_offset;

-- name: find_more
SELECT b.batch_id, f.object_key, b.byte_offset, b.byte_size, b.base_offset, b.last_offset,
       b.log_append_timestamp, b.batch_max_timestamp, b.timestamp_type, b.magic, b.producer_id,
       b.producer_epoch, b.base_sequence, b.last_sequence
FROM batches AS b JOIN files AS f ON f.file_id = b.file_id
WHERE b.log_id = $1 AND b.last_offset > $2
ORDER BY b.last_offset LIMIT $3;

-- name: log_bounds
SELECT log_start_offset, high_watermark FROM logs WHERE topic_id = $1 AND partition = $2;

-- name: max_timestamp
-- The bounds and the greatest effective timestamp; ties go to the earliest batch (offset order).
SELECT l.log_start_offset, l.high_watermark, m.ts, m.last_offset
FROM logs AS l
LEFT JOIN LATERAL (
    SELECT CASE WHEN timestamp_type = 1 THEN log_append_timestamp ELSE batch_max_timestamp END
           AS ts, last_offset
    FROM batches WHERE log_id = l.log_id
    ORDER BY ts DESC, last_offset ASC LIMIT 1
) AS m ON true
WHERE l.topic_id = $1 AND l.partition = $2;

-- name: offset_for_timestamp
SELECT l.log_start_offset, l.high_watermark, m.ts, m.base_offset
FROM logs AS l
LEFT JOIN LATERAL (
    SELECT CASE WHEN timestamp_type = 1 THEN log_append_timestamp ELSE batch_max_timestamp END
           AS ts, base_offset
    FROM batches
    WHERE log_id = l.log_id
      AND CASE WHEN timestamp_type = 1 THEN log_append_timestamp ELSE batch_max_timestamp END >= $3
    ORDER BY last_offset LIMIT 1
) AS m ON true
WHERE l.topic_id = $1 AND l.partition = $2;

-- name: files_to_delete
-- $3 NULL = no limit. Uses the partial index files_deleting_by_key.
SELECT object_key, marked_for_deletion_at_ms, size FROM files
WHERE state = 'deleting' AND object_key > $1 AND marked_for_deletion_at_ms < $2
ORDER BY object_key LIMIT $3;

-- name: list_partitions
SELECT topic_id, partition FROM logs ORDER BY topic_id, partition;
