-- capture every queue
BEGIN IMMEDIATE;
UPDATE jobq_tasks SET status=?, retries_left=CASE WHEN (jobq_tasks.status = 'failed' OR jobq_tasks.status = 'in_progress') THEN jobq_tasks.retries_left - ? ELSE jobq_tasks.retries_left END, attempt=(jobq_tasks.attempt + ?), locked_by=?, locked_until=strftime(?, ?, printf(?, coalesce(jobq_tasks.lease, ?))), started_at=strftime(?, ?), finished_at=? WHERE jobq_tasks.id IN (SELECT capturable.id 
FROM (SELECT waiting.id AS id, waiting.priority AS priority, waiting.run_at AS run_at 
FROM (SELECT jobq_tasks.id AS id, jobq_tasks.priority AS priority, jobq_tasks.run_at AS run_at 
FROM jobq_tasks 
WHERE (jobq_tasks.status = 'queued' OR jobq_tasks.status = 'failed' AND jobq_tasks.retries_left > 0 OR jobq_tasks.status = 'done' AND jobq_tasks.recurring = 1) AND jobq_tasks.run_at <= strftime(?, ?) AND (jobq_tasks.lock_key IS NULL OR NOT (jobq_tasks.lock_key IN (SELECT running.lock_key 
FROM jobq_tasks AS running 
WHERE running.lock_key IS NOT NULL AND running.status = 'in_progress') OR (EXISTS (SELECT * 
FROM jobq_tasks AS earlier 
WHERE earlier.lock_key = jobq_tasks.lock_key AND earlier.lock_key IS NOT NULL AND (earlier.status = 'queued' OR earlier.status = 'failed' AND earlier.retries_left > 0 OR earlier.status = 'in_progress' OR earlier.status = 'done' AND earlier.recurring = 1) AND earlier.id < jobq_tasks.id AND earlier.run_at <= strftime(?, ?) AND (earlier.status = 'queued' OR earlier.status = 'failed' AND earlier.retries_left > 0 OR earlier.status = 'done' AND earlier.recurring = 1))))) AND (jobq_tasks.queue_id NOT IN (SELECT jobq_limits.queue 
FROM jobq_limits)) ORDER BY jobq_tasks.priority DESC, jobq_tasks.run_at, jobq_tasks.id
 LIMIT ? OFFSET ?) AS waiting UNION ALL SELECT expired.id AS id, expired.priority AS priority, expired.run_at AS run_at 
FROM (SELECT jobq_tasks.id AS id, jobq_tasks.priority AS priority, jobq_tasks.run_at AS run_at 
FROM jobq_tasks 
WHERE jobq_tasks.status = 'in_progress' AND jobq_tasks.locked_until < strftime(?, ?) AND jobq_tasks.retries_left > 0 AND jobq_tasks.recurring = 0 AND jobq_tasks.cancel_requested_at IS NULL AND jobq_tasks.run_at <= strftime(?, ?) AND (jobq_tasks.lock_key IS NULL OR NOT (EXISTS (SELECT * 
FROM jobq_tasks AS earlier 
WHERE earlier.lock_key = jobq_tasks.lock_key AND earlier.lock_key IS NOT NULL AND (earlier.status = 'queued' OR earlier.status = 'failed' AND earlier.retries_left > 0 OR earlier.status = 'in_progress' OR earlier.status = 'done' AND earlier.recurring = 1) AND earlier.id < jobq_tasks.id AND earlier.run_at <= strftime(?, ?) AND (earlier.status = 'queued' OR earlier.status = 'failed' AND earlier.retries_left > 0 OR earlier.status = 'done' AND earlier.recurring = 1)))) AND (jobq_tasks.queue_id NOT IN (SELECT jobq_limits.queue 
FROM jobq_limits)) ORDER BY jobq_tasks.priority DESC, jobq_tasks.run_at, jobq_tasks.id
 LIMIT ? OFFSET ?) AS expired) AS capturable ORDER BY capturable.priority DESC, capturable.run_at, capturable.id
 LIMIT ? OFFSET ?) RETURNING id, queue_id, name, args, status, priority, run_at, retries_left, attempt, lease, timeout, locked_by, locked_until, unique_key, lock_key, result, error, recurring, created_at, started_at, finished_at, progress, cancel_requested_at, awaited, trace_context, workflow_id, fair_key;

-- capture two queues
BEGIN IMMEDIATE;
UPDATE jobq_tasks SET status=?, retries_left=CASE WHEN (jobq_tasks.status = 'failed' OR jobq_tasks.status = 'in_progress') THEN jobq_tasks.retries_left - ? ELSE jobq_tasks.retries_left END, attempt=(jobq_tasks.attempt + ?), locked_by=?, locked_until=strftime(?, ?, printf(?, coalesce(jobq_tasks.lease, ?))), started_at=strftime(?, ?), finished_at=? WHERE jobq_tasks.id IN (SELECT capturable.id 
FROM (SELECT waiting.id AS id, waiting.priority AS priority, waiting.run_at AS run_at 
FROM (SELECT jobq_tasks.id AS id, jobq_tasks.priority AS priority, jobq_tasks.run_at AS run_at 
FROM jobq_tasks 
WHERE (jobq_tasks.status = 'queued' OR jobq_tasks.status = 'failed' AND jobq_tasks.retries_left > 0 OR jobq_tasks.status = 'done' AND jobq_tasks.recurring = 1) AND jobq_tasks.run_at <= strftime(?, ?) AND (jobq_tasks.lock_key IS NULL OR NOT (jobq_tasks.lock_key IN (SELECT running.lock_key 
FROM jobq_tasks AS running 
WHERE running.lock_key IS NOT NULL AND running.status = 'in_progress') OR (EXISTS (SELECT * 
FROM jobq_tasks AS earlier 
WHERE earlier.lock_key = jobq_tasks.lock_key AND earlier.lock_key IS NOT NULL AND (earlier.status = 'queued' OR earlier.status = 'failed' AND earlier.retries_left > 0 OR earlier.status = 'in_progress' OR earlier.status = 'done' AND earlier.recurring = 1) AND earlier.id < jobq_tasks.id AND earlier.run_at <= strftime(?, ?) AND (earlier.status = 'queued' OR earlier.status = 'failed' AND earlier.retries_left > 0 OR earlier.status = 'done' AND earlier.recurring = 1))))) AND jobq_tasks.queue_id IN (?, ?) AND (jobq_tasks.queue_id NOT IN (SELECT jobq_limits.queue 
FROM jobq_limits)) ORDER BY jobq_tasks.priority DESC, jobq_tasks.run_at, jobq_tasks.id
 LIMIT ? OFFSET ?) AS waiting UNION ALL SELECT expired.id AS id, expired.priority AS priority, expired.run_at AS run_at 
FROM (SELECT jobq_tasks.id AS id, jobq_tasks.priority AS priority, jobq_tasks.run_at AS run_at 
FROM jobq_tasks 
WHERE jobq_tasks.status = 'in_progress' AND jobq_tasks.locked_until < strftime(?, ?) AND jobq_tasks.retries_left > 0 AND jobq_tasks.recurring = 0 AND jobq_tasks.cancel_requested_at IS NULL AND jobq_tasks.run_at <= strftime(?, ?) AND (jobq_tasks.lock_key IS NULL OR NOT (EXISTS (SELECT * 
FROM jobq_tasks AS earlier 
WHERE earlier.lock_key = jobq_tasks.lock_key AND earlier.lock_key IS NOT NULL AND (earlier.status = 'queued' OR earlier.status = 'failed' AND earlier.retries_left > 0 OR earlier.status = 'in_progress' OR earlier.status = 'done' AND earlier.recurring = 1) AND earlier.id < jobq_tasks.id AND earlier.run_at <= strftime(?, ?) AND (earlier.status = 'queued' OR earlier.status = 'failed' AND earlier.retries_left > 0 OR earlier.status = 'done' AND earlier.recurring = 1)))) AND jobq_tasks.queue_id IN (?, ?) AND (jobq_tasks.queue_id NOT IN (SELECT jobq_limits.queue 
FROM jobq_limits)) ORDER BY jobq_tasks.priority DESC, jobq_tasks.run_at, jobq_tasks.id
 LIMIT ? OFFSET ?) AS expired) AS capturable ORDER BY capturable.priority DESC, capturable.run_at, capturable.id
 LIMIT ? OFFSET ?) RETURNING id, queue_id, name, args, status, priority, run_at, retries_left, attempt, lease, timeout, locked_by, locked_until, unique_key, lock_key, result, error, recurring, created_at, started_at, finished_at, progress, cancel_requested_at, awaited, trace_context, workflow_id, fair_key;

-- capture one queue, leases by name
BEGIN IMMEDIATE;
UPDATE jobq_tasks SET status=?, retries_left=CASE WHEN (jobq_tasks.status = 'failed' OR jobq_tasks.status = 'in_progress') THEN jobq_tasks.retries_left - ? ELSE jobq_tasks.retries_left END, attempt=(jobq_tasks.attempt + ?), locked_by=?, locked_until=strftime(?, ?, printf(?, coalesce(jobq_tasks.lease, CASE WHEN (jobq_tasks.name = ?) THEN ? ELSE ? END))), started_at=strftime(?, ?), finished_at=? WHERE jobq_tasks.id IN (SELECT capturable.id 
FROM (SELECT waiting.id AS id, waiting.priority AS priority, waiting.run_at AS run_at 
FROM (SELECT jobq_tasks.id AS id, jobq_tasks.priority AS priority, jobq_tasks.run_at AS run_at 
FROM jobq_tasks 
WHERE (jobq_tasks.status = 'queued' OR jobq_tasks.status = 'failed' AND jobq_tasks.retries_left > 0 OR jobq_tasks.status = 'done' AND jobq_tasks.recurring = 1) AND jobq_tasks.run_at <= strftime(?, ?) AND (jobq_tasks.lock_key IS NULL OR NOT (jobq_tasks.lock_key IN (SELECT running.lock_key 
FROM jobq_tasks AS running 
WHERE running.lock_key IS NOT NULL AND running.status = 'in_progress') OR (EXISTS (SELECT * 
FROM jobq_tasks AS earlier 
WHERE earlier.lock_key = jobq_tasks.lock_key AND earlier.lock_key IS NOT NULL AND (earlier.status = 'queued' OR earlier.status = 'failed' AND earlier.retries_left > 0 OR earlier.status = 'in_progress' OR earlier.status = 'done' AND earlier.recurring = 1) AND earlier.id < jobq_tasks.id AND earlier.run_at <= strftime(?, ?) AND (earlier.status = 'queued' OR earlier.status = 'failed' AND earlier.retries_left > 0 OR earlier.status = 'done' AND earlier.recurring = 1))))) AND jobq_tasks.queue_id IN (?) AND (jobq_tasks.queue_id NOT IN (SELECT jobq_limits.queue 
FROM jobq_limits)) ORDER BY jobq_tasks.priority DESC, jobq_tasks.run_at, jobq_tasks.id
 LIMIT ? OFFSET ?) AS waiting UNION ALL SELECT expired.id AS id, expired.priority AS priority, expired.run_at AS run_at 
FROM (SELECT jobq_tasks.id AS id, jobq_tasks.priority AS priority, jobq_tasks.run_at AS run_at 
FROM jobq_tasks 
WHERE jobq_tasks.status = 'in_progress' AND jobq_tasks.locked_until < strftime(?, ?) AND jobq_tasks.retries_left > 0 AND jobq_tasks.recurring = 0 AND jobq_tasks.cancel_requested_at IS NULL AND jobq_tasks.run_at <= strftime(?, ?) AND (jobq_tasks.lock_key IS NULL OR NOT (EXISTS (SELECT * 
FROM jobq_tasks AS earlier 
WHERE earlier.lock_key = jobq_tasks.lock_key AND earlier.lock_key IS NOT NULL AND (earlier.status = 'queued' OR earlier.status = 'failed' AND earlier.retries_left > 0 OR earlier.status = 'in_progress' OR earlier.status = 'done' AND earlier.recurring = 1) AND earlier.id < jobq_tasks.id AND earlier.run_at <= strftime(?, ?) AND (earlier.status = 'queued' OR earlier.status = 'failed' AND earlier.retries_left > 0 OR earlier.status = 'done' AND earlier.recurring = 1)))) AND jobq_tasks.queue_id IN (?) AND (jobq_tasks.queue_id NOT IN (SELECT jobq_limits.queue 
FROM jobq_limits)) ORDER BY jobq_tasks.priority DESC, jobq_tasks.run_at, jobq_tasks.id
 LIMIT ? OFFSET ?) AS expired) AS capturable ORDER BY capturable.priority DESC, capturable.run_at, capturable.id
 LIMIT ? OFFSET ?) RETURNING id, queue_id, name, args, status, priority, run_at, retries_left, attempt, lease, timeout, locked_by, locked_until, unique_key, lock_key, result, error, recurring, created_at, started_at, finished_at, progress, cancel_requested_at, awaited, trace_context, workflow_id, fair_key;

-- capture with a lease in seconds
BEGIN IMMEDIATE;
UPDATE jobq_tasks SET status=?, retries_left=CASE WHEN (jobq_tasks.status = 'failed' OR jobq_tasks.status = 'in_progress') THEN jobq_tasks.retries_left - ? ELSE jobq_tasks.retries_left END, attempt=(jobq_tasks.attempt + ?), locked_by=?, locked_until=strftime(?, ?, printf(?, ?)), started_at=strftime(?, ?), finished_at=? WHERE jobq_tasks.id IN (SELECT capturable.id 
FROM (SELECT waiting.id AS id, waiting.priority AS priority, waiting.run_at AS run_at 
FROM (SELECT jobq_tasks.id AS id, jobq_tasks.priority AS priority, jobq_tasks.run_at AS run_at 
FROM jobq_tasks 
WHERE (jobq_tasks.status = 'queued' OR jobq_tasks.status = 'failed' AND jobq_tasks.retries_left > 0 OR jobq_tasks.status = 'done' AND jobq_tasks.recurring = 1) AND jobq_tasks.run_at <= strftime(?, ?) AND (jobq_tasks.lock_key IS NULL OR NOT (jobq_tasks.lock_key IN (SELECT running.lock_key 
FROM jobq_tasks AS running 
WHERE running.lock_key IS NOT NULL AND running.status = 'in_progress') OR (EXISTS (SELECT * 
FROM jobq_tasks AS earlier 
WHERE earlier.lock_key = jobq_tasks.lock_key AND earlier.lock_key IS NOT NULL AND (earlier.status = 'queued' OR earlier.status = 'failed' AND earlier.retries_left > 0 OR earlier.status = 'in_progress' OR earlier.status = 'done' AND earlier.recurring = 1) AND earlier.id < jobq_tasks.id AND earlier.run_at <= strftime(?, ?) AND (earlier.status = 'queued' OR earlier.status = 'failed' AND earlier.retries_left > 0 OR earlier.status = 'done' AND earlier.recurring = 1))))) AND (jobq_tasks.queue_id NOT IN (SELECT jobq_limits.queue 
FROM jobq_limits)) ORDER BY jobq_tasks.priority DESC, jobq_tasks.run_at, jobq_tasks.id
 LIMIT ? OFFSET ?) AS waiting UNION ALL SELECT expired.id AS id, expired.priority AS priority, expired.run_at AS run_at 
FROM (SELECT jobq_tasks.id AS id, jobq_tasks.priority AS priority, jobq_tasks.run_at AS run_at 
FROM jobq_tasks 
WHERE jobq_tasks.status = 'in_progress' AND jobq_tasks.locked_until < strftime(?, ?) AND jobq_tasks.retries_left > 0 AND jobq_tasks.recurring = 0 AND jobq_tasks.cancel_requested_at IS NULL AND jobq_tasks.run_at <= strftime(?, ?) AND (jobq_tasks.lock_key IS NULL OR NOT (EXISTS (SELECT * 
FROM jobq_tasks AS earlier 
WHERE earlier.lock_key = jobq_tasks.lock_key AND earlier.lock_key IS NOT NULL AND (earlier.status = 'queued' OR earlier.status = 'failed' AND earlier.retries_left > 0 OR earlier.status = 'in_progress' OR earlier.status = 'done' AND earlier.recurring = 1) AND earlier.id < jobq_tasks.id AND earlier.run_at <= strftime(?, ?) AND (earlier.status = 'queued' OR earlier.status = 'failed' AND earlier.retries_left > 0 OR earlier.status = 'done' AND earlier.recurring = 1)))) AND (jobq_tasks.queue_id NOT IN (SELECT jobq_limits.queue 
FROM jobq_limits)) ORDER BY jobq_tasks.priority DESC, jobq_tasks.run_at, jobq_tasks.id
 LIMIT ? OFFSET ?) AS expired) AS capturable ORDER BY capturable.priority DESC, capturable.run_at, capturable.id
 LIMIT ? OFFSET ?) RETURNING id, queue_id, name, args, status, priority, run_at, retries_left, attempt, lease, timeout, locked_by, locked_until, unique_key, lock_key, result, error, recurring, created_at, started_at, finished_at, progress, cancel_requested_at, awaited, trace_context, workflow_id, fair_key;

-- heartbeat
BEGIN IMMEDIATE;
UPDATE jobq_tasks SET locked_until=strftime(?, ?, printf(?, coalesce(jobq_tasks.lease, ?))) WHERE jobq_tasks.status = 'in_progress' AND jobq_tasks.locked_by = ? AND (jobq_tasks.id, jobq_tasks.attempt) IN (VALUES (?, ?), (?, ?), (?, ?), (?, ?), (?, ?)) RETURNING id;

-- heartbeat, leases by name
BEGIN IMMEDIATE;
UPDATE jobq_tasks SET locked_until=strftime(?, ?, printf(?, coalesce(jobq_tasks.lease, CASE WHEN (jobq_tasks.name = ?) THEN ? ELSE ? END))) WHERE jobq_tasks.status = 'in_progress' AND jobq_tasks.locked_by = ? AND (jobq_tasks.id, jobq_tasks.attempt) IN (VALUES (?, ?), (?, ?), (?, ?), (?, ?), (?, ?)) RETURNING id;

-- set_status done
BEGIN IMMEDIATE;
UPDATE jobq_tasks SET status=?, locked_by=?, locked_until=?, result=?, error=?, finished_at=strftime(?, ?) WHERE jobq_tasks.id = ? AND jobq_tasks.status = 'in_progress' AND jobq_tasks.attempt = ? AND jobq_tasks.recurring = 0 AND jobq_tasks.workflow_id IS NULL;

-- set_status failed, retry delay
BEGIN IMMEDIATE;
UPDATE jobq_tasks SET status=CASE WHEN (jobq_tasks.cancel_requested_at IS NOT NULL AND jobq_tasks.retries_left > 0) THEN ? ELSE ? END, run_at=CASE WHEN (jobq_tasks.cancel_requested_at IS NOT NULL AND jobq_tasks.retries_left > 0) THEN jobq_tasks.run_at ELSE CASE WHEN (jobq_tasks.retries_left > 0) THEN strftime(?, ?, printf(?, ?)) ELSE jobq_tasks.run_at END END, locked_by=?, locked_until=?, error=CASE WHEN (jobq_tasks.cancel_requested_at IS NOT NULL AND jobq_tasks.retries_left > 0) THEN ? ELSE ? END, finished_at=CASE WHEN (jobq_tasks.cancel_requested_at IS NOT NULL AND jobq_tasks.retries_left > 0) THEN strftime(?, ?) ELSE CASE WHEN (jobq_tasks.retries_left > 0) THEN NULL ELSE strftime(?, ?) END END WHERE jobq_tasks.id = ? AND jobq_tasks.status = 'in_progress' AND jobq_tasks.attempt = ? AND jobq_tasks.recurring = 0 AND jobq_tasks.workflow_id IS NULL;

-- set_statuses
BEGIN IMMEDIATE;
UPDATE jobq_tasks SET status=CASE WHEN (jobq_tasks.cancel_requested_at IS NOT NULL AND (record.status = ? OR record.status = ? AND jobq_tasks.retries_left > 0 AND record.terminal != ?)) THEN ? ELSE record.status END, run_at=CASE WHEN (jobq_tasks.cancel_requested_at IS NOT NULL AND (record.status = ? OR record.status = ? AND jobq_tasks.retries_left > 0 AND record.terminal != ?)) THEN jobq_tasks.run_at WHEN (record.status = ?) THEN CASE WHEN (jobq_tasks.retries_left > 0 AND record.terminal != ?) THEN strftime(?, ?, printf(?, record.delay)) ELSE jobq_tasks.run_at END WHEN (record.status = ?) THEN strftime(?, ?, printf(?, record.delay)) ELSE jobq_tasks.run_at END, retries_left=CASE WHEN (jobq_tasks.cancel_requested_at IS NOT NULL AND (record.status = ? OR record.status = ? AND jobq_tasks.retries_left > 0 AND record.terminal != ?)) THEN jobq_tasks.retries_left WHEN (record.status = ?) THEN CASE WHEN (record.terminal = ?) THEN ? ELSE jobq_tasks.retries_left END ELSE jobq_tasks.retries_left END, locked_by=?, locked_until=?, result=CASE WHEN (jobq_tasks.cancel_requested_at IS NOT NULL AND (record.status = ? OR record.status = ? AND jobq_tasks.retries_left > 0 AND record.terminal != ?)) THEN jobq_tasks.result WHEN (record.status = ?) THEN record.result ELSE jobq_tasks.result END, error=CASE WHEN (jobq_tasks.cancel_requested_at IS NOT NULL AND (record.status = ? OR record.status = ? AND jobq_tasks.retries_left > 0 AND record.terminal != ?)) THEN ? WHEN (record.status = ?) THEN NULL WHEN (record.status = ?) THEN record.error WHEN (record.status = ?) THEN record.error ELSE jobq_tasks.error END, finished_at=CASE WHEN (jobq_tasks.cancel_requested_at IS NOT NULL AND (record.status = ? OR record.status = ? AND jobq_tasks.retries_left > 0 AND record.terminal != ?)) THEN strftime(?, ?) WHEN (record.status = ?) THEN strftime(?, ?) WHEN (record.status = ?) THEN CASE WHEN (jobq_tasks.retries_left > 0 AND record.terminal != ?) THEN NULL ELSE strftime(?, ?) END WHEN (record.status = ?) THEN strftime(?, ?) ELSE jobq_tasks.finished_at END FROM (SELECT json_extract(anon_1.value, ?) AS id, json_extract(anon_1.value, ?) AS attempt, json_extract(anon_1.value, ?) AS status, json_extract(anon_1.value, ?) AS result, json_extract(anon_1.value, ?) AS error, json_extract(anon_1.value, ?) AS delay, json_extract(anon_1.value, ?) AS terminal 
FROM json_each(?) AS anon_1) AS record WHERE jobq_tasks.id = record.id AND jobq_tasks.status = 'in_progress' AND jobq_tasks.attempt = record.attempt AND jobq_tasks.recurring = 0;

-- complete and capture
BEGIN IMMEDIATE;
UPDATE jobq_tasks SET status=CASE WHEN (jobq_tasks.cancel_requested_at IS NOT NULL AND (record.status = ? OR record.status = ? AND jobq_tasks.retries_left > 0 AND record.terminal != ?)) THEN ? ELSE record.status END, run_at=CASE WHEN (jobq_tasks.cancel_requested_at IS NOT NULL AND (record.status = ? OR record.status = ? AND jobq_tasks.retries_left > 0 AND record.terminal != ?)) THEN jobq_tasks.run_at WHEN (record.status = ?) THEN CASE WHEN (jobq_tasks.retries_left > 0 AND record.terminal != ?) THEN strftime(?, ?, printf(?, record.delay)) ELSE jobq_tasks.run_at END WHEN (record.status = ?) THEN strftime(?, ?, printf(?, record.delay)) ELSE jobq_tasks.run_at END, retries_left=CASE WHEN (jobq_tasks.cancel_requested_at IS NOT NULL AND (record.status = ? OR record.status = ? AND jobq_tasks.retries_left > 0 AND record.terminal != ?)) THEN jobq_tasks.retries_left WHEN (record.status = ?) THEN CASE WHEN (record.terminal = ?) THEN ? ELSE jobq_tasks.retries_left END ELSE jobq_tasks.retries_left END, locked_by=?, locked_until=?, result=CASE WHEN (jobq_tasks.cancel_requested_at IS NOT NULL AND (record.status = ? OR record.status = ? AND jobq_tasks.retries_left > 0 AND record.terminal != ?)) THEN jobq_tasks.result WHEN (record.status = ?) THEN record.result ELSE jobq_tasks.result END, error=CASE WHEN (jobq_tasks.cancel_requested_at IS NOT NULL AND (record.status = ? OR record.status = ? AND jobq_tasks.retries_left > 0 AND record.terminal != ?)) THEN ? WHEN (record.status = ?) THEN NULL WHEN (record.status = ?) THEN record.error WHEN (record.status = ?) THEN record.error ELSE jobq_tasks.error END, finished_at=CASE WHEN (jobq_tasks.cancel_requested_at IS NOT NULL AND (record.status = ? OR record.status = ? AND jobq_tasks.retries_left > 0 AND record.terminal != ?)) THEN strftime(?, ?) WHEN (record.status = ?) THEN strftime(?, ?) WHEN (record.status = ?) THEN CASE WHEN (jobq_tasks.retries_left > 0 AND record.terminal != ?) THEN NULL ELSE strftime(?, ?) END WHEN (record.status = ?) THEN strftime(?, ?) ELSE jobq_tasks.finished_at END FROM (SELECT json_extract(anon_1.value, ?) AS id, json_extract(anon_1.value, ?) AS attempt, json_extract(anon_1.value, ?) AS status, json_extract(anon_1.value, ?) AS result, json_extract(anon_1.value, ?) AS error, json_extract(anon_1.value, ?) AS delay, json_extract(anon_1.value, ?) AS terminal 
FROM json_each(?) AS anon_1) AS record WHERE jobq_tasks.id = record.id AND jobq_tasks.status = 'in_progress' AND jobq_tasks.attempt = record.attempt AND jobq_tasks.recurring = 0;
UPDATE jobq_tasks SET status=?, retries_left=CASE WHEN (jobq_tasks.status = 'failed' OR jobq_tasks.status = 'in_progress') THEN jobq_tasks.retries_left - ? ELSE jobq_tasks.retries_left END, attempt=(jobq_tasks.attempt + ?), locked_by=?, locked_until=strftime(?, ?, printf(?, coalesce(jobq_tasks.lease, ?))), started_at=strftime(?, ?), finished_at=? WHERE jobq_tasks.id IN (SELECT capturable.id 
FROM (SELECT waiting.id AS id, waiting.priority AS priority, waiting.run_at AS run_at 
FROM (SELECT jobq_tasks.id AS id, jobq_tasks.priority AS priority, jobq_tasks.run_at AS run_at 
FROM jobq_tasks 
WHERE (jobq_tasks.status = 'queued' OR jobq_tasks.status = 'failed' AND jobq_tasks.retries_left > 0 OR jobq_tasks.status = 'done' AND jobq_tasks.recurring = 1) AND jobq_tasks.run_at <= strftime(?, ?) AND (jobq_tasks.lock_key IS NULL OR NOT (jobq_tasks.lock_key IN (SELECT running.lock_key 
FROM jobq_tasks AS running 
WHERE running.lock_key IS NOT NULL AND running.status = 'in_progress') OR (EXISTS (SELECT * 
FROM jobq_tasks AS earlier 
WHERE earlier.lock_key = jobq_tasks.lock_key AND earlier.lock_key IS NOT NULL AND (earlier.status = 'queued' OR earlier.status = 'failed' AND earlier.retries_left > 0 OR earlier.status = 'in_progress' OR earlier.status = 'done' AND earlier.recurring = 1) AND earlier.id < jobq_tasks.id AND earlier.run_at <= strftime(?, ?) AND (earlier.status = 'queued' OR earlier.status = 'failed' AND earlier.retries_left > 0 OR earlier.status = 'done' AND earlier.recurring = 1))))) AND jobq_tasks.queue_id IN (?) AND (jobq_tasks.queue_id NOT IN (SELECT jobq_limits.queue 
FROM jobq_limits)) ORDER BY jobq_tasks.priority DESC, jobq_tasks.run_at, jobq_tasks.id
 LIMIT ? OFFSET ?) AS waiting UNION ALL SELECT expired.id AS id, expired.priority AS priority, expired.run_at AS run_at 
FROM (SELECT jobq_tasks.id AS id, jobq_tasks.priority AS priority, jobq_tasks.run_at AS run_at 
FROM jobq_tasks 
WHERE jobq_tasks.status = 'in_progress' AND jobq_tasks.locked_until < strftime(?, ?) AND jobq_tasks.retries_left > 0 AND jobq_tasks.recurring = 0 AND jobq_tasks.cancel_requested_at IS NULL AND jobq_tasks.run_at <= strftime(?, ?) AND (jobq_tasks.lock_key IS NULL OR NOT (EXISTS (SELECT * 
FROM jobq_tasks AS earlier 
WHERE earlier.lock_key = jobq_tasks.lock_key AND earlier.lock_key IS NOT NULL AND (earlier.status = 'queued' OR earlier.status = 'failed' AND earlier.retries_left > 0 OR earlier.status = 'in_progress' OR earlier.status = 'done' AND earlier.recurring = 1) AND earlier.id < jobq_tasks.id AND earlier.run_at <= strftime(?, ?) AND (earlier.status = 'queued' OR earlier.status = 'failed' AND earlier.retries_left > 0 OR earlier.status = 'done' AND earlier.recurring = 1)))) AND jobq_tasks.queue_id IN (?) AND (jobq_tasks.queue_id NOT IN (SELECT jobq_limits.queue 
FROM jobq_limits)) ORDER BY jobq_tasks.priority DESC, jobq_tasks.run_at, jobq_tasks.id
 LIMIT ? OFFSET ?) AS expired) AS capturable ORDER BY capturable.priority DESC, capturable.run_at, capturable.id
 LIMIT ? OFFSET ?) RETURNING id, queue_id, name, args, status, priority, run_at, retries_left, attempt, lease, timeout, locked_by, locked_until, unique_key, lock_key, result, error, recurring, created_at, started_at, finished_at, progress, cancel_requested_at, awaited, trace_context, workflow_id, fair_key;

-- stale end
BEGIN IMMEDIATE;
UPDATE jobq_tasks SET status=?, locked_by=?, locked_until=?, result=?, error=?, finished_at=strftime(?, ?) WHERE jobq_tasks.id = ? AND jobq_tasks.status = 'in_progress' AND jobq_tasks.attempt = ? AND jobq_tasks.recurring = 0 AND jobq_tasks.workflow_id IS NULL;
BEGIN IMMEDIATE;
UPDATE jobq_tasks SET status=?, locked_by=?, locked_until=?, result=?, error=?, finished_at=strftime(?, ?) WHERE jobq_tasks.id = ? AND jobq_tasks.status = 'in_progress' AND jobq_tasks.attempt = ? AND jobq_tasks.recurring = 0 AND jobq_tasks.workflow_id IS NOT NULL;
BEGIN IMMEDIATE;
SELECT jobq_tasks.id, jobq_tasks.attempt, jobq_tasks.retries_left, jobq_tasks.run_at, jobq_tasks.started_at, jobq_schedules.name, jobq_schedules.cron, jobq_schedules.timezone, jobq_schedules.retries, jobq_schedules.enabled, jobq_schedules.defined, jobq_schedules.lock_key AS defined_lock_key 
FROM jobq_tasks LEFT OUTER JOIN jobq_schedules ON jobq_schedules.task_id = jobq_tasks.id 
WHERE jobq_tasks.recurring = 1 AND jobq_tasks.status = 'in_progress' AND (jobq_tasks.id, jobq_tasks.attempt) IN (VALUES (?, ?));

-- rescue
BEGIN IMMEDIATE;
UPDATE jobq_tasks SET status=CASE WHEN (jobq_tasks.cancel_requested_at IS NOT NULL) THEN ? ELSE ? END, run_at=CASE WHEN (jobq_tasks.retries_left > ? AND jobq_tasks.cancel_requested_at IS NULL) THEN strftime(?, ?) ELSE jobq_tasks.run_at END, locked_by=?, locked_until=?, error=CASE WHEN (jobq_tasks.cancel_requested_at IS NOT NULL) THEN ? ELSE ? END, finished_at=CASE WHEN (jobq_tasks.retries_left > ? AND jobq_tasks.cancel_requested_at IS NULL) THEN NULL ELSE strftime(?, ?) END WHERE jobq_tasks.status = ? AND jobq_tasks.locked_until < strftime(?, ?) AND jobq_tasks.recurring = 0;
BEGIN;
SELECT jobq_tasks.id, jobq_tasks.attempt 
FROM jobq_tasks 
WHERE jobq_tasks.status = 'in_progress' AND jobq_tasks.locked_until < strftime(?, ?) AND jobq_tasks.recurring = 1;

