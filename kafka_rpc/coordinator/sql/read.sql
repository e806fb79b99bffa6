-- Statements of the read-only connection, run inside one read transaction per group of calls
-- (one consistent WAL snapshot). Sections are named by "-- name: <name>".

-- name: select_log_bounds
SELECT log_id, log_start_offset, high_watermark FROM logs WHERE topic_id = ? AND partition = ?;

-- name: find_batches
-- Uses the batches primary key (log_id, last_offset): a range scan that the caller stops as
-- soon as the fetch budget is spent, so the cost is O(result), not O(consumer lag).
SELECT b.batch_id, f.object_key, b.byte_offset, b.byte_size, b.base_offset, b.last_offset,
       b.log_append_timestamp, b.batch_max_timestamp, b.timestamp_type, b.magic, b.producer_id,
       b.producer_epoch, b.base_sequence, b.last_sequence
FROM batches AS b JOIN files AS f ON f.file_id = b.file_id
WHERE b.log_id = ? AND b.last_offset >= ?
ORDER BY b.last_offset;

-- name: max_timestamp
-- The greatest effective timestamp; ties go to the earliest batch (offset order).
SELECT CASE WHEN timestamp_type = 1 THEN log_append_timestamp ELSE batch_max_timestamp END AS ts,
       last_offset
FROM batches WHERE log_id = ?
ORDER BY ts DESC, last_offset ASC LIMIT 1;

-- name: offset_for_timestamp
SELECT CASE WHEN timestamp_type = 1 THEN log_append_timestamp ELSE batch_max_timestamp END AS ts,
       base_offset
FROM batches
WHERE log_id = ?
  AND CASE WHEN timestamp_type = 1 THEN log_append_timestamp ELSE batch_max_timestamp END >= ?
ORDER BY last_offset LIMIT 1;

-- name: files_to_delete
-- LIMIT -1 = no limit. Uses the partial index files_deleting_by_key.
SELECT object_key, marked_for_deletion_at_ms, size FROM files
WHERE state = 'deleting' AND object_key > ? AND marked_for_deletion_at_ms < ?
ORDER BY object_key LIMIT ?;

-- name: list_partitions
SELECT topic_id, partition FROM logs ORDER BY topic_id, partition;
