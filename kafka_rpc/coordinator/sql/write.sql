-- Statements of the writer connection. Each runs inside the group transaction (BEGIN IMMEDIATE),
-- and inside the operation's SAVEPOINT when a failed group is re-run; see sqlite.py
-- (_run_write_group). Sections are named by "-- name: <name>".

-- name: file_exists
SELECT 1 FROM files WHERE object_key = ?;

-- name: insert_file
INSERT INTO files (object_key, state, uploader_broker_id, committed_at_ms, size)
VALUES (?, 'uploaded', ?, ?, ?);

-- name: mark_file_deleting
UPDATE files SET state = 'deleting', marked_for_deletion_at_ms = ?
WHERE file_id = ? AND state = 'uploaded';

-- name: set_file_batch_count
UPDATE files SET batch_count = ? WHERE file_id = ?;

-- name: release_file_batches
-- ?1 of the file's batches were deleted: the file becomes garbage ('deleting', marked at ?2) when
-- that was all of them. (Right-hand sides see the row before the update.)
UPDATE files SET batch_count = batch_count - ?1,
                 state = CASE WHEN batch_count = ?1 THEN 'deleting' ELSE state END,
                 marked_for_deletion_at_ms = CASE WHEN batch_count = ?1 THEN ?2
                                                  ELSE marked_for_deletion_at_ms END
WHERE file_id = ?3;

-- name: select_next_batch_id
SELECT next_batch_id FROM batch_id_seq;

-- name: update_next_batch_id
UPDATE batch_id_seq SET next_batch_id = ?;

-- name: select_log
SELECT log_id, log_start_offset, high_watermark, byte_size
FROM logs WHERE topic_id = ? AND partition = ?;

-- name: insert_batch
INSERT INTO batches (batch_id, log_id, base_offset, last_offset, file_id, byte_offset, byte_size,
                     magic, timestamp_type, log_append_timestamp, batch_max_timestamp,
                     producer_id, producer_epoch, base_sequence, last_sequence)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?);

-- name: update_log_head
UPDATE logs SET high_watermark = ?, byte_size = ? WHERE log_id = ?;

-- name: select_producer_state
SELECT row_id, producer_epoch, base_sequence, last_sequence, assigned_offset, batch_timestamp,
       committed_at_ms
FROM producer_state WHERE log_id = ? AND producer_id = ? ORDER BY row_id;

-- name: insert_producer_state
INSERT INTO producer_state (log_id, producer_id, producer_epoch, base_sequence, last_sequence,
                            assigned_offset, batch_timestamp, committed_at_ms)
VALUES (?, ?, ?, ?, ?, ?, ?, ?);

-- name: delete_producer_state_row
DELETE FROM producer_state WHERE row_id = ?;

-- name: insert_log
INSERT INTO logs (topic_id, partition, topic_name) VALUES (?, ?, ?)
ON CONFLICT (topic_id, partition) DO NOTHING;

-- name: delete_batches_below
DELETE FROM batches WHERE log_id = ? AND last_offset < ? RETURNING file_id, byte_size;

-- name: update_log_tail
UPDATE logs SET log_start_offset = ?, byte_size = byte_size - ? WHERE log_id = ?;

-- name: retention_scan
SELECT base_offset, byte_size,
       CASE WHEN timestamp_type = 1 THEN log_append_timestamp ELSE batch_max_timestamp END
FROM batches WHERE log_id = ? ORDER BY last_offset;

-- name: select_logs_of_topic
SELECT log_id FROM logs WHERE topic_id = ?;

-- name: count_batches_of_log_by_file
SELECT file_id, count(*) FROM batches WHERE log_id = ? GROUP BY file_id;

-- name: delete_batches_of_log
DELETE FROM batches WHERE log_id = ?;

-- name: delete_producer_state_of_log
DELETE FROM producer_state WHERE log_id = ?;

-- name: delete_log
DELETE FROM logs WHERE log_id = ?;

-- name: delete_deleting_file
DELETE FROM files WHERE object_key = ? AND state = 'deleting';
