-- capture a limited queue
BEGIN IMMEDIATE;
SELECT jobq_limits.queue, jobq_limits.concurrency, jobq_limits.rate_count, jobq_limits.rate_period, jobq_limits.generation, jobq_limits.updated_at, jobq_limits.paused, jobq_limits.fair, jobq_limits.default_weight, jobq_limits.max_running_per_key, jobq_limits.fair_cursor, jobq_limits.fair_cursor_taken 
FROM jobq_limits 
WHERE jobq_limits.queue = ?;
SELECT count(*) AS count_1 
FROM jobq_tasks 
WHERE jobq_tasks.queue_id = ? AND jobq_tasks.status = 'in_progress' AND jobq_tasks.locked_until >= strftime(?, ?);
UPDATE jobq_tasks SET status=?, retries_left=CASE WHEN (jobq_tasks.status = 'failed' OR jobq_tasks.status = 'in_progress') THEN jobq_tasks.retries_left - ? ELSE jobq_tasks.retries_left END, attempt=(jobq_tasks.attempt + ?), locked_by=?, locked_until=strftime(?, ?, printf(?, coalesce(jobq_tasks.lease, ?))), started_at=strftime(?, ?), finished_at=? WHERE jobq_tasks.id IN (SELECT capturable.id 
FROM (SELECT waiting.id AS id, waiting.priority AS priority, waiting.run_at AS run_at 
FROM (SELECT jobq_tasks.id AS id, jobq_tasks.priority AS priority, jobq_tasks.run_at AS run_at 
FROM jobq_tasks 
WHERE (jobq_tasks.status = 'queued' OR jobq_tasks.status = 'failed' AND jobq_tasks.retries_left > 0 OR jobq_tasks.status = 'done' AND jobq_tasks.recurring = 1) AND jobq_tasks.run_at <= strftime(?, ?) AND (jobq_tasks.lock_key IS NULL OR NOT (jobq_tasks.lock_key IN (SELECT running.lock_key 
FROM jobq_tasks AS running 
WHERE running.lock_key IS NOT NULL AND running.status = 'in_progress') OR (EXISTS (SELECT * 
FROM jobq_tasks AS earlier 
WHERE earlier.lock_key = jobq_tasks.lock_key AND earlier.lock_key IS NOT NULL AND (earlier.status = 'queued' OR earlier.status = 'failed' AND earlier.retries_left > 0 OR earlier.status = 'in_progress' OR earlier.status = 'done' AND earlier.recurring = 1) AND earlier.id < jobq_tasks.id AND earlier.run_at <= strftime(?, ?) AND (earlier.status = 'queued' OR earlier.status = 'failed' AND earlier.retries_left > 0 OR earlier.status = 'done' AND earlier.recurring = 1))))) AND jobq_tasks.queue_id IN (?) AND (jobq_tasks.queue_id NOT IN (SELECT jobq_limits.queue 
FROM jobq_limits 
WHERE jobq_limits.paused = 1)) ORDER BY jobq_tasks.priority DESC, jobq_tasks.run_at, jobq_tasks.id
 LIMIT ? OFFSET ?) AS waiting UNION ALL SELECT expired.id AS id, expired.priority AS priority, expired.run_at AS run_at 
FROM (SELECT jobq_tasks.id AS id, jobq_tasks.priority AS priority, jobq_tasks.run_at AS run_at 
FROM jobq_tasks 
WHERE jobq_tasks.status = 'in_progress' AND jobq_tasks.locked_until < strftime(?, ?) AND jobq_tasks.retries_left > 0 AND jobq_tasks.recurring = 0 AND jobq_tasks.cancel_requested_at IS NULL AND jobq_tasks.run_at <= strftime(?, ?) AND (jobq_tasks.lock_key IS NULL OR NOT (EXISTS (SELECT * 
FROM jobq_tasks AS earlier 
WHERE earlier.lock_key = jobq_tasks.lock_key AND earlier.lock_key IS NOT NULL AND (earlier.status = 'queued' OR earlier.status = 'failed' AND earlier.retries_left > 0 OR earlier.status = 'in_progress' OR earlier.status = 'done' AND earlier.recurring = 1) AND earlier.id < jobq_tasks.id AND earlier.run_at <= strftime(?, ?) AND (earlier.status = 'queued' OR earlier.status = 'failed' AND earlier.retries_left > 0 OR earlier.status = 'done' AND earlier.recurring = 1)))) AND jobq_tasks.queue_id IN (?) AND (jobq_tasks.queue_id NOT IN (SELECT jobq_limits.queue 
FROM jobq_limits 
WHERE jobq_limits.paused = 1)) ORDER BY jobq_tasks.priority DESC, jobq_tasks.run_at, jobq_tasks.id
 LIMIT ? OFFSET ?) AS expired) AS capturable ORDER BY capturable.priority DESC, capturable.run_at, capturable.id
 LIMIT ? OFFSET ?) RETURNING id, queue_id, name, args, status, priority, run_at, retries_left, attempt, lease, timeout, locked_by, locked_until, unique_key, lock_key, result, error, recurring, created_at, started_at, finished_at, progress, cancel_requested_at, awaited, trace_context, workflow_id, fair_key;

-- end runs of a limited queue
BEGIN IMMEDIATE;
UPDATE jobq_tasks SET status=CASE WHEN (jobq_tasks.cancel_requested_at IS NOT NULL AND (record.status = ? OR record.status = ? AND jobq_tasks.retries_left > 0 AND record.terminal != ?)) THEN ? ELSE record.status END, run_at=CASE WHEN (jobq_tasks.cancel_requested_at IS NOT NULL AND (record.status = ? OR record.status = ? AND jobq_tasks.retries_left > 0 AND record.terminal != ?)) THEN jobq_tasks.run_at WHEN (record.status = ?) THEN CASE WHEN (jobq_tasks.retries_left > 0 AND record.terminal != ?) THEN strftime(?, ?, printf(?, record.delay)) ELSE jobq_tasks.run_at END WHEN (record.status = ?) THEN strftime(?, ?, printf(?, record.delay)) ELSE jobq_tasks.run_at END, retries_left=CASE WHEN (jobq_tasks.cancel_requested_at IS NOT NULL AND (record.status = ? OR record.status = ? AND jobq_tasks.retries_left > 0 AND record.terminal != ?)) THEN jobq_tasks.retries_left WHEN (record.status = ?) THEN CASE WHEN (record.terminal = ?) THEN ? ELSE jobq_tasks.retries_left END ELSE jobq_tasks.retries_left END, locked_by=?, locked_until=?, result=CASE WHEN (jobq_tasks.cancel_requested_at IS NOT NULL AND (record.status = ? OR record.status = ? AND jobq_tasks.retries_left > 0 AND record.terminal != ?)) THEN jobq_tasks.result WHEN (record.status = ?) THEN record.result ELSE jobq_tasks.result END, error=CASE WHEN (jobq_tasks.cancel_requested_at IS NOT NULL AND (record.status = ? OR record.status = ? AND jobq_tasks.retries_left > 0 AND record.terminal != ?)) THEN ? WHEN (record.status = ?) THEN NULL WHEN (record.status = ?) THEN record.error WHEN (record.status = ?) THEN record.error ELSE jobq_tasks.error END, finished_at=CASE WHEN (jobq_tasks.cancel_requested_at IS NOT NULL AND (record.status = ? OR record.status = ? AND jobq_tasks.retries_left > 0 AND record.terminal != ?)) THEN strftime(?, ?) WHEN (record.status = ?) THEN strftime(?, ?) WHEN (record.status = ?) THEN CASE WHEN (jobq_tasks.retries_left > 0 AND record.terminal != ?) THEN NULL ELSE strftime(?, ?) END WHEN (record.status = ?) THEN strftime(?, ?) ELSE jobq_tasks.finished_at END FROM (SELECT json_extract(anon_1.value, ?) AS id, json_extract(anon_1.value, ?) AS attempt, json_extract(anon_1.value, ?) AS status, json_extract(anon_1.value, ?) AS result, json_extract(anon_1.value, ?) AS error, json_extract(anon_1.value, ?) AS delay, json_extract(anon_1.value, ?) AS terminal 
FROM json_each(?) AS anon_1) AS record WHERE jobq_tasks.id = record.id AND jobq_tasks.status = 'in_progress' AND jobq_tasks.attempt = record.attempt AND jobq_tasks.recurring = 0;

-- end of a workflow node
BEGIN IMMEDIATE;
UPDATE jobq_tasks SET status=CASE WHEN (jobq_tasks.cancel_requested_at IS NOT NULL AND (record.status = ? OR record.status = ? AND jobq_tasks.retries_left > 0 AND record.terminal != ?)) THEN ? ELSE record.status END, run_at=CASE WHEN (jobq_tasks.cancel_requested_at IS NOT NULL AND (record.status = ? OR record.status = ? AND jobq_tasks.retries_left > 0 AND record.terminal != ?)) THEN jobq_tasks.run_at WHEN (record.status = ?) THEN CASE WHEN (jobq_tasks.retries_left > 0 AND record.terminal != ?) THEN strftime(?, ?, printf(?, record.delay)) ELSE jobq_tasks.run_at END WHEN (record.status = ?) THEN strftime(?, ?, printf(?, record.delay)) ELSE jobq_tasks.run_at END, retries_left=CASE WHEN (jobq_tasks.cancel_requested_at IS NOT NULL AND (record.status = ? OR record.status = ? AND jobq_tasks.retries_left > 0 AND record.terminal != ?)) THEN jobq_tasks.retries_left WHEN (record.status = ?) THEN CASE WHEN (record.terminal = ?) THEN ? ELSE jobq_tasks.retries_left END ELSE jobq_tasks.retries_left END, locked_by=?, locked_until=?, result=CASE WHEN (jobq_tasks.cancel_requested_at IS NOT NULL AND (record.status = ? OR record.status = ? AND jobq_tasks.retries_left > 0 AND record.terminal != ?)) THEN jobq_tasks.result WHEN (record.status = ?) THEN record.result ELSE jobq_tasks.result END, error=CASE WHEN (jobq_tasks.cancel_requested_at IS NOT NULL AND (record.status = ? OR record.status = ? AND jobq_tasks.retries_left > 0 AND record.terminal != ?)) THEN ? WHEN (record.status = ?) THEN NULL WHEN (record.status = ?) THEN record.error WHEN (record.status = ?) THEN record.error ELSE jobq_tasks.error END, finished_at=CASE WHEN (jobq_tasks.cancel_requested_at IS NOT NULL AND (record.status = ? OR record.status = ? AND jobq_tasks.retries_left > 0 AND record.terminal != ?)) THEN strftime(?, ?) WHEN (record.status = ?) THEN strftime(?, ?) WHEN (record.status = ?) THEN CASE WHEN (jobq_tasks.retries_left > 0 AND record.terminal != ?) THEN NULL ELSE strftime(?, ?) END WHEN (record.status = ?) THEN strftime(?, ?) ELSE jobq_tasks.finished_at END FROM (SELECT json_extract(anon_1.value, ?) AS id, json_extract(anon_1.value, ?) AS attempt, json_extract(anon_1.value, ?) AS status, json_extract(anon_1.value, ?) AS result, json_extract(anon_1.value, ?) AS error, json_extract(anon_1.value, ?) AS delay, json_extract(anon_1.value, ?) AS terminal 
FROM json_each(?) AS anon_1) AS record WHERE jobq_tasks.id = record.id AND jobq_tasks.status = 'in_progress' AND jobq_tasks.attempt = record.attempt AND jobq_tasks.recurring = 0;
UPDATE jobq_task_edges SET parent_done=? WHERE jobq_task_edges.parent_id IN (?) AND jobq_task_edges.parent_id IN (SELECT jobq_tasks.id 
FROM jobq_tasks 
WHERE jobq_tasks.id IN (?) AND jobq_tasks.status = 'done') AND jobq_task_edges.parent_done = 0;
SELECT anon_1.child_id 
FROM (SELECT DISTINCT jobq_task_edges.child_id AS child_id 
FROM jobq_task_edges 
WHERE jobq_task_edges.parent_id IN (?)) AS anon_1 JOIN jobq_tasks ON jobq_tasks.id = anon_1.child_id AND jobq_tasks.status = 'blocked' 
WHERE NOT (EXISTS (SELECT * 
FROM jobq_task_edges AS pending 
WHERE pending.child_id = anon_1.child_id AND pending.parent_done = 0));
UPDATE jobq_tasks SET status=?, run_at=CASE WHEN (jobq_tasks.run_at > strftime(?, ?)) THEN jobq_tasks.run_at ELSE strftime(?, ?) END WHERE jobq_tasks.id IN (?) AND jobq_tasks.status = 'blocked';
SELECT DISTINCT jobq_task_edges.parent_id 
FROM jobq_task_edges JOIN jobq_tasks ON jobq_tasks.id = jobq_task_edges.child_id AND jobq_tasks.status = 'blocked' 
WHERE jobq_task_edges.parent_id IN (?);

-- end of a cron row's run
BEGIN IMMEDIATE;
UPDATE jobq_tasks SET status=CASE WHEN (jobq_tasks.cancel_requested_at IS NOT NULL AND (record.status = ? OR record.status = ? AND jobq_tasks.retries_left > 0 AND record.terminal != ?)) THEN ? ELSE record.status END, run_at=CASE WHEN (jobq_tasks.cancel_requested_at IS NOT NULL AND (record.status = ? OR record.status = ? AND jobq_tasks.retries_left > 0 AND record.terminal != ?)) THEN jobq_tasks.run_at WHEN (record.status = ?) THEN CASE WHEN (jobq_tasks.retries_left > 0 AND record.terminal != ?) THEN strftime(?, ?, printf(?, record.delay)) ELSE jobq_tasks.run_at END WHEN (record.status = ?) THEN strftime(?, ?, printf(?, record.delay)) ELSE jobq_tasks.run_at END, retries_left=CASE WHEN (jobq_tasks.cancel_requested_at IS NOT NULL AND (record.status = ? OR record.status = ? AND jobq_tasks.retries_left > 0 AND record.terminal != ?)) THEN jobq_tasks.retries_left WHEN (record.status = ?) THEN CASE WHEN (record.terminal = ?) THEN ? ELSE jobq_tasks.retries_left END ELSE jobq_tasks.retries_left END, locked_by=?, locked_until=?, result=CASE WHEN (jobq_tasks.cancel_requested_at IS NOT NULL AND (record.status = ? OR record.status = ? AND jobq_tasks.retries_left > 0 AND record.terminal != ?)) THEN jobq_tasks.result WHEN (record.status = ?) THEN record.result ELSE jobq_tasks.result END, error=CASE WHEN (jobq_tasks.cancel_requested_at IS NOT NULL AND (record.status = ? OR record.status = ? AND jobq_tasks.retries_left > 0 AND record.terminal != ?)) THEN ? WHEN (record.status = ?) THEN NULL WHEN (record.status = ?) THEN record.error WHEN (record.status = ?) THEN record.error ELSE jobq_tasks.error END, finished_at=CASE WHEN (jobq_tasks.cancel_requested_at IS NOT NULL AND (record.status = ? OR record.status = ? AND jobq_tasks.retries_left > 0 AND record.terminal != ?)) THEN strftime(?, ?) WHEN (record.status = ?) THEN strftime(?, ?) WHEN (record.status = ?) THEN CASE WHEN (jobq_tasks.retries_left > 0 AND record.terminal != ?) THEN NULL ELSE strftime(?, ?) END WHEN (record.status = ?) THEN strftime(?, ?) ELSE jobq_tasks.finished_at END FROM (SELECT json_extract(anon_1.value, ?) AS id, json_extract(anon_1.value, ?) AS attempt, json_extract(anon_1.value, ?) AS status, json_extract(anon_1.value, ?) AS result, json_extract(anon_1.value, ?) AS error, json_extract(anon_1.value, ?) AS delay, json_extract(anon_1.value, ?) AS terminal 
FROM json_each(?) AS anon_1) AS record WHERE jobq_tasks.id = record.id AND jobq_tasks.status = 'in_progress' AND jobq_tasks.attempt = record.attempt AND jobq_tasks.recurring = 0;
BEGIN IMMEDIATE;
SELECT jobq_tasks.id, jobq_tasks.attempt, jobq_tasks.retries_left, jobq_tasks.run_at, jobq_tasks.started_at, jobq_schedules.name, jobq_schedules.cron, jobq_schedules.timezone, jobq_schedules.retries, jobq_schedules.enabled, jobq_schedules.defined, jobq_schedules.lock_key AS defined_lock_key 
FROM jobq_tasks LEFT OUTER JOIN jobq_schedules ON jobq_schedules.task_id = jobq_tasks.id 
WHERE jobq_tasks.recurring = 1 AND jobq_tasks.status = 'in_progress' AND (jobq_tasks.id, jobq_tasks.attempt) IN (VALUES (?, ?));
SELECT strftime(?, ?) AS strftime_1;
UPDATE jobq_tasks SET status=?, run_at=?, retries_left=?, locked_by=?, locked_until=?, lock_key=?, result=?, error=?, finished_at=? WHERE jobq_tasks.id = ? AND jobq_tasks.status = 'in_progress' AND jobq_tasks.attempt = ?;
UPDATE jobq_schedules SET last_status=?, updated_at=? WHERE jobq_schedules.name = ?;
INSERT INTO jobq_schedule_runs (schedule, task_id, attempt, status, started_at, finished_at, error) VALUES (?, ?, ?, ?, ?, ?, ?);
SELECT jobq_schedule_runs.id 
FROM jobq_schedule_runs 
WHERE jobq_schedule_runs.schedule = ? ORDER BY jobq_schedule_runs.id DESC
 LIMIT ? OFFSET ?;

