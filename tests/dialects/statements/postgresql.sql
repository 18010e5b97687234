-- capture every queue
WITH waiting AS 
(SELECT jobq_tasks.id AS id, jobq_tasks.priority AS priority, jobq_tasks.run_at AS run_at 
FROM jobq_tasks 
WHERE (jobq_tasks.status = 'queued' OR jobq_tasks.status = 'failed' AND jobq_tasks.retries_left > 0 OR jobq_tasks.status = 'done' AND jobq_tasks.recurring) AND jobq_tasks.run_at <= now() AND (jobq_tasks.lock_key IS NULL OR NOT (jobq_tasks.lock_key IN (SELECT running.lock_key 
FROM jobq_tasks AS running 
WHERE running.lock_key IS NOT NULL AND running.status = 'in_progress') OR (EXISTS (SELECT * 
FROM jobq_tasks AS earlier 
WHERE earlier.lock_key = jobq_tasks.lock_key AND earlier.lock_key IS NOT NULL AND (earlier.status = 'queued' OR earlier.status = 'failed' AND earlier.retries_left > 0 OR earlier.status = 'in_progress' OR earlier.status = 'done' AND earlier.recurring) AND earlier.id < jobq_tasks.id AND earlier.run_at <= now() AND (earlier.status = 'queued' OR earlier.status = 'failed' AND earlier.retries_left > 0 OR earlier.status = 'done' AND earlier.recurring))))) AND (jobq_tasks.queue_id NOT IN (SELECT jobq_limits.queue 
FROM jobq_limits)) ORDER BY jobq_tasks.priority DESC, jobq_tasks.run_at, jobq_tasks.id 
 LIMIT %(limit)s::INTEGER FOR UPDATE SKIP LOCKED), 
expired AS 
(SELECT jobq_tasks.id AS id, jobq_tasks.priority AS priority, jobq_tasks.run_at AS run_at 
FROM jobq_tasks 
WHERE jobq_tasks.status = 'in_progress' AND jobq_tasks.locked_until < now() AND jobq_tasks.retries_left > 0 AND NOT jobq_tasks.recurring AND jobq_tasks.cancel_requested_at IS NULL AND jobq_tasks.run_at <= now() AND (jobq_tasks.lock_key IS NULL OR NOT (EXISTS (SELECT * 
FROM jobq_tasks AS earlier 
WHERE earlier.lock_key = jobq_tasks.lock_key AND earlier.lock_key IS NOT NULL AND (earlier.status = 'queued' OR earlier.status = 'failed' AND earlier.retries_left > 0 OR earlier.status = 'in_progress' OR earlier.status = 'done' AND earlier.recurring) AND earlier.id < jobq_tasks.id AND earlier.run_at <= now() AND (earlier.status = 'queued' OR earlier.status = 'failed' AND earlier.retries_left > 0 OR earlier.status = 'done' AND earlier.recurring)))) AND (jobq_tasks.queue_id NOT IN (SELECT jobq_limits.queue 
FROM jobq_limits)) ORDER BY jobq_tasks.priority DESC, jobq_tasks.run_at, jobq_tasks.id 
 LIMIT %(limit)s::INTEGER FOR UPDATE SKIP LOCKED), 
picked AS 
(SELECT capturable.id AS id 
FROM (SELECT waiting.id AS id, waiting.priority AS priority, waiting.run_at AS run_at 
FROM waiting UNION ALL SELECT expired.id AS id, expired.priority AS priority, expired.run_at AS run_at 
FROM expired) AS capturable ORDER BY capturable.priority DESC, capturable.run_at, capturable.id 
 LIMIT %(limit)s::INTEGER)
 UPDATE jobq_tasks SET status=%(status)s::VARCHAR, retries_left=CASE WHEN (jobq_tasks.status = 'failed' OR jobq_tasks.status = 'in_progress') THEN jobq_tasks.retries_left - %(retries_left_1)s::INTEGER ELSE jobq_tasks.retries_left END, attempt=(jobq_tasks.attempt + %(attempt_1)s::INTEGER), locked_by=%(worker_id)s::VARCHAR, locked_until=(now() + make_interval(%(make_interval_1)s::INTEGER, %(make_interval_2)s::INTEGER, %(make_interval_3)s::INTEGER, %(make_interval_4)s::INTEGER, %(make_interval_5)s::INTEGER, %(make_interval_6)s::INTEGER, coalesce(jobq_tasks.lease, %(lease_default)s))), started_at=now(), finished_at=%(finished_at)s::TIMESTAMP WITH TIME ZONE WHERE jobq_tasks.id = ANY (array((SELECT picked.id 
FROM picked))) RETURNING jobq_tasks.id, jobq_tasks.queue_id, jobq_tasks.name, jobq_tasks.args, jobq_tasks.status, jobq_tasks.priority, jobq_tasks.run_at, jobq_tasks.retries_left, jobq_tasks.attempt, jobq_tasks.lease, jobq_tasks.timeout, jobq_tasks.locked_by, jobq_tasks.locked_until, jobq_tasks.unique_key, jobq_tasks.lock_key, jobq_tasks.result, jobq_tasks.error, jobq_tasks.recurring, jobq_tasks.created_at, jobq_tasks.started_at, jobq_tasks.finished_at, jobq_tasks.progress, jobq_tasks.cancel_requested_at, jobq_tasks.awaited, jobq_tasks.trace_context, jobq_tasks.workflow_id, jobq_tasks.fair_key;

-- capture two queues
WITH waiting AS 
(SELECT jobq_tasks.id AS id, jobq_tasks.priority AS priority, jobq_tasks.run_at AS run_at 
FROM jobq_tasks 
WHERE (jobq_tasks.status = 'queued' OR jobq_tasks.status = 'failed' AND jobq_tasks.retries_left > 0 OR jobq_tasks.status = 'done' AND jobq_tasks.recurring) AND jobq_tasks.run_at <= now() AND (jobq_tasks.lock_key IS NULL OR NOT (jobq_tasks.lock_key IN (SELECT running.lock_key 
FROM jobq_tasks AS running 
WHERE running.lock_key IS NOT NULL AND running.status = 'in_progress') OR (EXISTS (SELECT * 
FROM jobq_tasks AS earlier 
WHERE earlier.lock_key = jobq_tasks.lock_key AND earlier.lock_key IS NOT NULL AND (earlier.status = 'queued' OR earlier.status = 'failed' AND earlier.retries_left > 0 OR earlier.status = 'in_progress' OR earlier.status = 'done' AND earlier.recurring) AND earlier.id < jobq_tasks.id AND earlier.run_at <= now() AND (earlier.status = 'queued' OR earlier.status = 'failed' AND earlier.retries_left > 0 OR earlier.status = 'done' AND earlier.recurring))))) AND jobq_tasks.queue_id IN (%(queue_0)s::VARCHAR, %(queue_1)s::VARCHAR) AND (jobq_tasks.queue_id NOT IN (SELECT jobq_limits.queue 
FROM jobq_limits)) ORDER BY jobq_tasks.priority DESC, jobq_tasks.run_at, jobq_tasks.id 
 LIMIT %(limit)s::INTEGER FOR UPDATE SKIP LOCKED), 
expired AS 
(SELECT jobq_tasks.id AS id, jobq_tasks.priority AS priority, jobq_tasks.run_at AS run_at 
FROM jobq_tasks 
WHERE jobq_tasks.status = 'in_progress' AND jobq_tasks.locked_until < now() AND jobq_tasks.retries_left > 0 AND NOT jobq_tasks.recurring AND jobq_tasks.cancel_requested_at IS NULL AND jobq_tasks.run_at <= now() AND (jobq_tasks.lock_key IS NULL OR NOT (EXISTS (SELECT * 
FROM jobq_tasks AS earlier 
WHERE earlier.lock_key = jobq_tasks.lock_key AND earlier.lock_key IS NOT NULL AND (earlier.status = 'queued' OR earlier.status = 'failed' AND earlier.retries_left > 0 OR earlier.status = 'in_progress' OR earlier.status = 'done' AND earlier.recurring) AND earlier.id < jobq_tasks.id AND earlier.run_at <= now() AND (earlier.status = 'queued' OR earlier.status = 'failed' AND earlier.retries_left > 0 OR earlier.status = 'done' AND earlier.recurring)))) AND jobq_tasks.queue_id IN (%(queue_0)s::VARCHAR, %(queue_1)s::VARCHAR) AND (jobq_tasks.queue_id NOT IN (SELECT jobq_limits.queue 
FROM jobq_limits)) ORDER BY jobq_tasks.priority DESC, jobq_tasks.run_at, jobq_tasks.id 
 LIMIT %(limit)s::INTEGER FOR UPDATE SKIP LOCKED), 
picked AS 
(SELECT capturable.id AS id 
FROM (SELECT waiting.id AS id, waiting.priority AS priority, waiting.run_at AS run_at 
FROM waiting UNION ALL SELECT expired.id AS id, expired.priority AS priority, expired.run_at AS run_at 
FROM expired) AS capturable ORDER BY capturable.priority DESC, capturable.run_at, capturable.id 
 LIMIT %(limit)s::INTEGER)
 UPDATE jobq_tasks SET status=%(status)s::VARCHAR, retries_left=CASE WHEN (jobq_tasks.status = 'failed' OR jobq_tasks.status = 'in_progress') THEN jobq_tasks.retries_left - %(retries_left_1)s::INTEGER ELSE jobq_tasks.retries_left END, attempt=(jobq_tasks.attempt + %(attempt_1)s::INTEGER), locked_by=%(worker_id)s::VARCHAR, locked_until=(now() + make_interval(%(make_interval_1)s::INTEGER, %(make_interval_2)s::INTEGER, %(make_interval_3)s::INTEGER, %(make_interval_4)s::INTEGER, %(make_interval_5)s::INTEGER, %(make_interval_6)s::INTEGER, coalesce(jobq_tasks.lease, %(lease_default)s))), started_at=now(), finished_at=%(finished_at)s::TIMESTAMP WITH TIME ZONE WHERE jobq_tasks.id = ANY (array((SELECT picked.id 
FROM picked))) RETURNING jobq_tasks.id, jobq_tasks.queue_id, jobq_tasks.name, jobq_tasks.args, jobq_tasks.status, jobq_tasks.priority, jobq_tasks.run_at, jobq_tasks.retries_left, jobq_tasks.attempt, jobq_tasks.lease, jobq_tasks.timeout, jobq_tasks.locked_by, jobq_tasks.locked_until, jobq_tasks.unique_key, jobq_tasks.lock_key, jobq_tasks.result, jobq_tasks.error, jobq_tasks.recurring, jobq_tasks.created_at, jobq_tasks.started_at, jobq_tasks.finished_at, jobq_tasks.progress, jobq_tasks.cancel_requested_at, jobq_tasks.awaited, jobq_tasks.trace_context, jobq_tasks.workflow_id, jobq_tasks.fair_key;

-- capture one queue, leases by name
WITH waiting AS 
(SELECT jobq_tasks.id AS id, jobq_tasks.priority AS priority, jobq_tasks.run_at AS run_at 
FROM jobq_tasks 
WHERE (jobq_tasks.status = 'queued' OR jobq_tasks.status = 'failed' AND jobq_tasks.retries_left > 0 OR jobq_tasks.status = 'done' AND jobq_tasks.recurring) AND jobq_tasks.run_at <= now() AND (jobq_tasks.lock_key IS NULL OR NOT (jobq_tasks.lock_key IN (SELECT running.lock_key 
FROM jobq_tasks AS running 
WHERE running.lock_key IS NOT NULL AND running.status = 'in_progress') OR (EXISTS (SELECT * 
FROM jobq_tasks AS earlier 
WHERE earlier.lock_key = jobq_tasks.lock_key AND earlier.lock_key IS NOT NULL AND (earlier.status = 'queued' OR earlier.status = 'failed' AND earlier.retries_left > 0 OR earlier.status = 'in_progress' OR earlier.status = 'done' AND earlier.recurring) AND earlier.id < jobq_tasks.id AND earlier.run_at <= now() AND (earlier.status = 'queued' OR earlier.status = 'failed' AND earlier.retries_left > 0 OR earlier.status = 'done' AND earlier.recurring))))) AND jobq_tasks.queue_id IN (%(queue_0)s::VARCHAR) AND (jobq_tasks.queue_id NOT IN (SELECT jobq_limits.queue 
FROM jobq_limits)) ORDER BY jobq_tasks.priority DESC, jobq_tasks.run_at, jobq_tasks.id 
 LIMIT %(limit)s::INTEGER FOR UPDATE SKIP LOCKED), 
expired AS 
(SELECT jobq_tasks.id AS id, jobq_tasks.priority AS priority, jobq_tasks.run_at AS run_at 
FROM jobq_tasks 
WHERE jobq_tasks.status = 'in_progress' AND jobq_tasks.locked_until < now() AND jobq_tasks.retries_left > 0 AND NOT jobq_tasks.recurring AND jobq_tasks.cancel_requested_at IS NULL AND jobq_tasks.run_at <= now() AND (jobq_tasks.lock_key IS NULL OR NOT (EXISTS (SELECT * 
FROM jobq_tasks AS earlier 
WHERE earlier.lock_key = jobq_tasks.lock_key AND earlier.lock_key IS NOT NULL AND (earlier.status = 'queued' OR earlier.status = 'failed' AND earlier.retries_left > 0 OR earlier.status = 'in_progress' OR earlier.status = 'done' AND earlier.recurring) AND earlier.id < jobq_tasks.id AND earlier.run_at <= now() AND (earlier.status = 'queued' OR earlier.status = 'failed' AND earlier.retries_left > 0 OR earlier.status = 'done' AND earlier.recurring)))) AND jobq_tasks.queue_id IN (%(queue_0)s::VARCHAR) AND (jobq_tasks.queue_id NOT IN (SELECT jobq_limits.queue 
FROM jobq_limits)) ORDER BY jobq_tasks.priority DESC, jobq_tasks.run_at, jobq_tasks.id 
 LIMIT %(limit)s::INTEGER FOR UPDATE SKIP LOCKED), 
picked AS 
(SELECT capturable.id AS id 
FROM (SELECT waiting.id AS id, waiting.priority AS priority, waiting.run_at AS run_at 
FROM waiting UNION ALL SELECT expired.id AS id, expired.priority AS priority, expired.run_at AS run_at 
FROM expired) AS capturable ORDER BY capturable.priority DESC, capturable.run_at, capturable.id 
 LIMIT %(limit)s::INTEGER)
 UPDATE jobq_tasks SET status=%(status)s::VARCHAR, retries_left=CASE WHEN (jobq_tasks.status = 'failed' OR jobq_tasks.status = 'in_progress') THEN jobq_tasks.retries_left - %(retries_left_1)s::INTEGER ELSE jobq_tasks.retries_left END, attempt=(jobq_tasks.attempt + %(attempt_1)s::INTEGER), locked_by=%(worker_id)s::VARCHAR, locked_until=(now() + make_interval(%(make_interval_1)s::INTEGER, %(make_interval_2)s::INTEGER, %(make_interval_3)s::INTEGER, %(make_interval_4)s::INTEGER, %(make_interval_5)s::INTEGER, %(make_interval_6)s::INTEGER, coalesce(jobq_tasks.lease, CASE WHEN (jobq_tasks.name = %(lease_name_0)s::VARCHAR) THEN %(lease_value_0)s ELSE %(lease_default)s END))), started_at=now(), finished_at=%(finished_at)s::TIMESTAMP WITH TIME ZONE WHERE jobq_tasks.id = ANY (array((SELECT picked.id 
FROM picked))) RETURNING jobq_tasks.id, jobq_tasks.queue_id, jobq_tasks.name, jobq_tasks.args, jobq_tasks.status, jobq_tasks.priority, jobq_tasks.run_at, jobq_tasks.retries_left, jobq_tasks.attempt, jobq_tasks.lease, jobq_tasks.timeout, jobq_tasks.locked_by, jobq_tasks.locked_until, jobq_tasks.unique_key, jobq_tasks.lock_key, jobq_tasks.result, jobq_tasks.error, jobq_tasks.recurring, jobq_tasks.created_at, jobq_tasks.started_at, jobq_tasks.finished_at, jobq_tasks.progress, jobq_tasks.cancel_requested_at, jobq_tasks.awaited, jobq_tasks.trace_context, jobq_tasks.workflow_id, jobq_tasks.fair_key;

-- capture with a lease in seconds
WITH waiting AS 
(SELECT jobq_tasks.id AS id, jobq_tasks.priority AS priority, jobq_tasks.run_at AS run_at 
FROM jobq_tasks 
WHERE (jobq_tasks.status = 'queued' OR jobq_tasks.status = 'failed' AND jobq_tasks.retries_left > 0 OR jobq_tasks.status = 'done' AND jobq_tasks.recurring) AND jobq_tasks.run_at <= now() AND (jobq_tasks.lock_key IS NULL OR NOT (jobq_tasks.lock_key IN (SELECT running.lock_key 
FROM jobq_tasks AS running 
WHERE running.lock_key IS NOT NULL AND running.status = 'in_progress') OR (EXISTS (SELECT * 
FROM jobq_tasks AS earlier 
WHERE earlier.lock_key = jobq_tasks.lock_key AND earlier.lock_key IS NOT NULL AND (earlier.status = 'queued' OR earlier.status = 'failed' AND earlier.retries_left > 0 OR earlier.status = 'in_progress' OR earlier.status = 'done' AND earlier.recurring) AND earlier.id < jobq_tasks.id AND earlier.run_at <= now() AND (earlier.status = 'queued' OR earlier.status = 'failed' AND earlier.retries_left > 0 OR earlier.status = 'done' AND earlier.recurring))))) AND (jobq_tasks.queue_id NOT IN (SELECT jobq_limits.queue 
FROM jobq_limits)) ORDER BY jobq_tasks.priority DESC, jobq_tasks.run_at, jobq_tasks.id 
 LIMIT %(limit)s::INTEGER FOR UPDATE SKIP LOCKED), 
expired AS 
(SELECT jobq_tasks.id AS id, jobq_tasks.priority AS priority, jobq_tasks.run_at AS run_at 
FROM jobq_tasks 
WHERE jobq_tasks.status = 'in_progress' AND jobq_tasks.locked_until < now() AND jobq_tasks.retries_left > 0 AND NOT jobq_tasks.recurring AND jobq_tasks.cancel_requested_at IS NULL AND jobq_tasks.run_at <= now() AND (jobq_tasks.lock_key IS NULL OR NOT (EXISTS (SELECT * 
FROM jobq_tasks AS earlier 
WHERE earlier.lock_key = jobq_tasks.lock_key AND earlier.lock_key IS NOT NULL AND (earlier.status = 'queued' OR earlier.status = 'failed' AND earlier.retries_left > 0 OR earlier.status = 'in_progress' OR earlier.status = 'done' AND earlier.recurring) AND earlier.id < jobq_tasks.id AND earlier.run_at <= now() AND (earlier.status = 'queued' OR earlier.status = 'failed' AND earlier.retries_left > 0 OR earlier.status = 'done' AND earlier.recurring)))) AND (jobq_tasks.queue_id NOT IN (SELECT jobq_limits.queue 
FROM jobq_limits)) ORDER BY jobq_tasks.priority DESC, jobq_tasks.run_at, jobq_tasks.id 
 LIMIT %(limit)s::INTEGER FOR UPDATE SKIP LOCKED), 
picked AS 
(SELECT capturable.id AS id 
FROM (SELECT waiting.id AS id, waiting.priority AS priority, waiting.run_at AS run_at 
FROM waiting UNION ALL SELECT expired.id AS id, expired.priority AS priority, expired.run_at AS run_at 
FROM expired) AS capturable ORDER BY capturable.priority DESC, capturable.run_at, capturable.id 
 LIMIT %(limit)s::INTEGER)
 UPDATE jobq_tasks SET status=%(status)s::VARCHAR, retries_left=CASE WHEN (jobq_tasks.status = 'failed' OR jobq_tasks.status = 'in_progress') THEN jobq_tasks.retries_left - %(retries_left_1)s::INTEGER ELSE jobq_tasks.retries_left END, attempt=(jobq_tasks.attempt + %(attempt_1)s::INTEGER), locked_by=%(worker_id)s::VARCHAR, locked_until=(now() + make_interval(%(make_interval_1)s::INTEGER, %(make_interval_2)s::INTEGER, %(make_interval_3)s::INTEGER, %(make_interval_4)s::INTEGER, %(make_interval_5)s::INTEGER, %(make_interval_6)s::INTEGER, %(lease_seconds)s)), started_at=now(), finished_at=%(finished_at)s::TIMESTAMP WITH TIME ZONE WHERE jobq_tasks.id = ANY (array((SELECT picked.id 
FROM picked))) RETURNING jobq_tasks.id, jobq_tasks.queue_id, jobq_tasks.name, jobq_tasks.args, jobq_tasks.status, jobq_tasks.priority, jobq_tasks.run_at, jobq_tasks.retries_left, jobq_tasks.attempt, jobq_tasks.lease, jobq_tasks.timeout, jobq_tasks.locked_by, jobq_tasks.locked_until, jobq_tasks.unique_key, jobq_tasks.lock_key, jobq_tasks.result, jobq_tasks.error, jobq_tasks.recurring, jobq_tasks.created_at, jobq_tasks.started_at, jobq_tasks.finished_at, jobq_tasks.progress, jobq_tasks.cancel_requested_at, jobq_tasks.awaited, jobq_tasks.trace_context, jobq_tasks.workflow_id, jobq_tasks.fair_key;

-- heartbeat
UPDATE jobq_tasks SET locked_until=(now() + make_interval(%(make_interval_1)s::INTEGER, %(make_interval_2)s::INTEGER, %(make_interval_3)s::INTEGER, %(make_interval_4)s::INTEGER, %(make_interval_5)s::INTEGER, %(make_interval_6)s::INTEGER, coalesce(jobq_tasks.lease, %(lease_default)s))) WHERE jobq_tasks.status = 'in_progress' AND jobq_tasks.locked_by = %(worker_id)s::VARCHAR AND (jobq_tasks.id, jobq_tasks.attempt) IN ((%(owned_1_1)s, %(owned_1_2)s), (%(owned_2_1)s, %(owned_2_2)s), (%(owned_3_1)s, %(owned_3_2)s), (%(owned_4_1)s, %(owned_4_2)s), (%(owned_5_1)s, %(owned_5_2)s)) RETURNING jobq_tasks.id;

-- heartbeat, leases by name
UPDATE jobq_tasks SET locked_until=(now() + make_interval(%(make_interval_1)s::INTEGER, %(make_interval_2)s::INTEGER, %(make_interval_3)s::INTEGER, %(make_interval_4)s::INTEGER, %(make_interval_5)s::INTEGER, %(make_interval_6)s::INTEGER, coalesce(jobq_tasks.lease, CASE WHEN (jobq_tasks.name = %(lease_name_0)s::VARCHAR) THEN %(lease_value_0)s ELSE %(lease_default)s END))) WHERE jobq_tasks.status = 'in_progress' AND jobq_tasks.locked_by = %(worker_id)s::VARCHAR AND (jobq_tasks.id, jobq_tasks.attempt) IN ((%(owned_1_1)s, %(owned_1_2)s), (%(owned_2_1)s, %(owned_2_2)s), (%(owned_3_1)s, %(owned_3_2)s), (%(owned_4_1)s, %(owned_4_2)s), (%(owned_5_1)s, %(owned_5_2)s)) RETURNING jobq_tasks.id;

-- set_status done
UPDATE jobq_tasks SET status=%(status)s::VARCHAR, locked_by=%(locked_by)s::VARCHAR, locked_until=%(locked_until)s::TIMESTAMP WITH TIME ZONE, result=%(new_result)s::JSON, error=%(error)s::VARCHAR, finished_at=now() WHERE jobq_tasks.id = %(task_id)s::BIGINT AND jobq_tasks.status = 'in_progress' AND jobq_tasks.attempt = %(run_attempt)s::INTEGER AND NOT jobq_tasks.recurring AND jobq_tasks.workflow_id IS NULL;

-- set_status failed, retry delay
UPDATE jobq_tasks SET status=CASE WHEN (jobq_tasks.cancel_requested_at IS NOT NULL AND jobq_tasks.retries_left > 0) THEN %(param_1)s::VARCHAR ELSE %(param_2)s::VARCHAR END, run_at=CASE WHEN (jobq_tasks.cancel_requested_at IS NOT NULL AND jobq_tasks.retries_left > 0) THEN jobq_tasks.run_at ELSE CASE WHEN (jobq_tasks.retries_left > 0) THEN now() + make_interval(%(make_interval_1)s::INTEGER, %(make_interval_2)s::INTEGER, %(make_interval_3)s::INTEGER, %(make_interval_4)s::INTEGER, %(make_interval_5)s::INTEGER, %(make_interval_6)s::INTEGER, %(delay)s) ELSE jobq_tasks.run_at END END, locked_by=%(locked_by)s::VARCHAR, locked_until=%(locked_until)s::TIMESTAMP WITH TIME ZONE, error=CASE WHEN (jobq_tasks.cancel_requested_at IS NOT NULL AND jobq_tasks.retries_left > 0) THEN %(param_3)s::VARCHAR ELSE %(new_error)s::VARCHAR END, finished_at=CASE WHEN (jobq_tasks.cancel_requested_at IS NOT NULL AND jobq_tasks.retries_left > 0) THEN now() ELSE CASE WHEN (jobq_tasks.retries_left > 0) THEN NULL ELSE now() END END WHERE jobq_tasks.id = %(task_id)s::BIGINT AND jobq_tasks.status = 'in_progress' AND jobq_tasks.attempt = %(run_attempt)s::INTEGER AND NOT jobq_tasks.recurring AND jobq_tasks.workflow_id IS NULL;

-- set_statuses
UPDATE jobq_tasks SET status=CASE WHEN (jobq_tasks.cancel_requested_at IS NOT NULL AND (anon_1.status = %(status_1)s::VARCHAR OR anon_1.status = %(status_2)s::VARCHAR AND jobq_tasks.retries_left > 0 AND anon_1.terminal != %(terminal_1)s::INTEGER)) THEN %(param_1)s::VARCHAR ELSE anon_1.status END, run_at=CASE WHEN (jobq_tasks.cancel_requested_at IS NOT NULL AND (anon_1.status = %(status_1)s::VARCHAR OR anon_1.status = %(status_2)s::VARCHAR AND jobq_tasks.retries_left > 0 AND anon_1.terminal != %(terminal_1)s::INTEGER)) THEN jobq_tasks.run_at WHEN (anon_1.status = %(status_3)s::VARCHAR) THEN CASE WHEN (jobq_tasks.retries_left > 0 AND anon_1.terminal != %(terminal_2)s::INTEGER) THEN now() + make_interval(%(make_interval_1)s::INTEGER, %(make_interval_2)s::INTEGER, %(make_interval_3)s::INTEGER, %(make_interval_4)s::INTEGER, %(make_interval_5)s::INTEGER, %(make_interval_6)s::INTEGER, anon_1.delay) ELSE jobq_tasks.run_at END WHEN (anon_1.status = %(status_4)s::VARCHAR) THEN now() + make_interval(%(make_interval_7)s::INTEGER, %(make_interval_8)s::INTEGER, %(make_interval_9)s::INTEGER, %(make_interval_10)s::INTEGER, %(make_interval_11)s::INTEGER, %(make_interval_12)s::INTEGER, anon_1.delay) ELSE jobq_tasks.run_at END, retries_left=CASE WHEN (jobq_tasks.cancel_requested_at IS NOT NULL AND (anon_1.status = %(status_1)s::VARCHAR OR anon_1.status = %(status_2)s::VARCHAR AND jobq_tasks.retries_left > 0 AND anon_1.terminal != %(terminal_1)s::INTEGER)) THEN jobq_tasks.retries_left WHEN (anon_1.status = %(status_5)s::VARCHAR) THEN CASE WHEN (anon_1.terminal = %(terminal_2)s::INTEGER) THEN %(param_2)s::INTEGER ELSE jobq_tasks.retries_left END ELSE jobq_tasks.retries_left END, locked_by=%(locked_by)s::VARCHAR, locked_until=%(locked_until)s::TIMESTAMP WITH TIME ZONE, result=CASE WHEN (jobq_tasks.cancel_requested_at IS NOT NULL AND (anon_1.status = %(status_1)s::VARCHAR OR anon_1.status = %(status_2)s::VARCHAR AND jobq_tasks.retries_left > 0 AND anon_1.terminal != %(terminal_1)s::INTEGER)) THEN jobq_tasks.result WHEN (anon_1.status = %(status_6)s::VARCHAR) THEN CAST(anon_1.result AS JSON) ELSE jobq_tasks.result END, error=CASE WHEN (jobq_tasks.cancel_requested_at IS NOT NULL AND (anon_1.status = %(status_1)s::VARCHAR OR anon_1.status = %(status_2)s::VARCHAR AND jobq_tasks.retries_left > 0 AND anon_1.terminal != %(terminal_1)s::INTEGER)) THEN %(param_3)s::VARCHAR WHEN (anon_1.status = %(status_7)s::VARCHAR) THEN NULL WHEN (anon_1.status = %(status_8)s::VARCHAR) THEN anon_1.error WHEN (anon_1.status = %(status_9)s::VARCHAR) THEN anon_1.error ELSE jobq_tasks.error END, finished_at=CASE WHEN (jobq_tasks.cancel_requested_at IS NOT NULL AND (anon_1.status = %(status_1)s::VARCHAR OR anon_1.status = %(status_2)s::VARCHAR AND jobq_tasks.retries_left > 0 AND anon_1.terminal != %(terminal_1)s::INTEGER)) THEN now() WHEN (anon_1.status = %(status_10)s::VARCHAR) THEN now() WHEN (anon_1.status = %(status_11)s::VARCHAR) THEN CASE WHEN (jobq_tasks.retries_left > 0 AND anon_1.terminal != %(terminal_2)s::INTEGER) THEN NULL ELSE now() END WHEN (anon_1.status = %(status_12)s::VARCHAR) THEN now() ELSE jobq_tasks.finished_at END FROM json_to_recordset(CAST(%(completions)s::VARCHAR AS JSON)) AS anon_1(id BIGINT, attempt INTEGER, status VARCHAR, result TEXT, error TEXT, delay FLOAT, terminal INTEGER) WHERE jobq_tasks.id = ANY (array((SELECT anon_1.id 
FROM json_to_recordset(CAST(%(completions)s::VARCHAR AS JSON)) AS anon_1(id BIGINT, attempt INTEGER, status VARCHAR, result TEXT, error TEXT, delay FLOAT, terminal INTEGER)))) AND jobq_tasks.id = anon_1.id AND jobq_tasks.status = 'in_progress' AND jobq_tasks.attempt = anon_1.attempt AND NOT jobq_tasks.recurring;

-- complete and capture
WITH recorded AS 
(UPDATE jobq_tasks SET status=CASE WHEN (jobq_tasks.cancel_requested_at IS NOT NULL AND (anon_1.status = %(status_1)s::VARCHAR OR anon_1.status = %(status_2)s::VARCHAR AND jobq_tasks.retries_left > 0 AND anon_1.terminal != %(terminal_1)s::INTEGER)) THEN %(param_1)s::VARCHAR ELSE anon_1.status END, run_at=CASE WHEN (jobq_tasks.cancel_requested_at IS NOT NULL AND (anon_1.status = %(status_1)s::VARCHAR OR anon_1.status = %(status_2)s::VARCHAR AND jobq_tasks.retries_left > 0 AND anon_1.terminal != %(terminal_1)s::INTEGER)) THEN jobq_tasks.run_at WHEN (anon_1.status = %(status_3)s::VARCHAR) THEN CASE WHEN (jobq_tasks.retries_left > 0 AND anon_1.terminal != %(terminal_2)s::INTEGER) THEN now() + make_interval(%(make_interval_1)s::INTEGER, %(make_interval_2)s::INTEGER, %(make_interval_3)s::INTEGER, %(make_interval_4)s::INTEGER, %(make_interval_5)s::INTEGER, %(make_interval_6)s::INTEGER, anon_1.delay) ELSE jobq_tasks.run_at END WHEN (anon_1.status = %(status_4)s::VARCHAR) THEN now() + make_interval(%(make_interval_7)s::INTEGER, %(make_interval_8)s::INTEGER, %(make_interval_9)s::INTEGER, %(make_interval_10)s::INTEGER, %(make_interval_11)s::INTEGER, %(make_interval_12)s::INTEGER, anon_1.delay) ELSE jobq_tasks.run_at END, retries_left=CASE WHEN (jobq_tasks.cancel_requested_at IS NOT NULL AND (anon_1.status = %(status_1)s::VARCHAR OR anon_1.status = %(status_2)s::VARCHAR AND jobq_tasks.retries_left > 0 AND anon_1.terminal != %(terminal_1)s::INTEGER)) THEN jobq_tasks.retries_left WHEN (anon_1.status = %(status_5)s::VARCHAR) THEN CASE WHEN (anon_1.terminal = %(terminal_2)s::INTEGER) THEN %(param_2)s::INTEGER ELSE jobq_tasks.retries_left END ELSE jobq_tasks.retries_left END, locked_by=%(param_3)s::VARCHAR, locked_until=%(param_4)s::TIMESTAMP WITH TIME ZONE, result=CASE WHEN (jobq_tasks.cancel_requested_at IS NOT NULL AND (anon_1.status = %(status_1)s::VARCHAR OR anon_1.status = %(status_2)s::VARCHAR AND jobq_tasks.retries_left > 0 AND anon_1.terminal != %(terminal_1)s::INTEGER)) THEN jobq_tasks.result WHEN (anon_1.status = %(status_6)s::VARCHAR) THEN CAST(anon_1.result AS JSON) ELSE jobq_tasks.result END, error=CASE WHEN (jobq_tasks.cancel_requested_at IS NOT NULL AND (anon_1.status = %(status_1)s::VARCHAR OR anon_1.status = %(status_2)s::VARCHAR AND jobq_tasks.retries_left > 0 AND anon_1.terminal != %(terminal_1)s::INTEGER)) THEN %(param_5)s::VARCHAR WHEN (anon_1.status = %(status_7)s::VARCHAR) THEN NULL WHEN (anon_1.status = %(status_8)s::VARCHAR) THEN anon_1.error WHEN (anon_1.status = %(status_9)s::VARCHAR) THEN anon_1.error ELSE jobq_tasks.error END, finished_at=CASE WHEN (jobq_tasks.cancel_requested_at IS NOT NULL AND (anon_1.status = %(status_1)s::VARCHAR OR anon_1.status = %(status_2)s::VARCHAR AND jobq_tasks.retries_left > 0 AND anon_1.terminal != %(terminal_1)s::INTEGER)) THEN now() WHEN (anon_1.status = %(status_10)s::VARCHAR) THEN now() WHEN (anon_1.status = %(status_11)s::VARCHAR) THEN CASE WHEN (jobq_tasks.retries_left > 0 AND anon_1.terminal != %(terminal_2)s::INTEGER) THEN NULL ELSE now() END WHEN (anon_1.status = %(status_12)s::VARCHAR) THEN now() ELSE jobq_tasks.finished_at END FROM json_to_recordset(CAST(%(completions)s::VARCHAR AS JSON)) AS anon_1(id BIGINT, attempt INTEGER, status VARCHAR, result TEXT, error TEXT, delay FLOAT, terminal INTEGER) WHERE jobq_tasks.id = ANY (array((SELECT anon_1.id 
FROM json_to_recordset(CAST(%(completions)s::VARCHAR AS JSON)) AS anon_1(id BIGINT, attempt INTEGER, status VARCHAR, result TEXT, error TEXT, delay FLOAT, terminal INTEGER)))) AND jobq_tasks.id = anon_1.id AND jobq_tasks.status = 'in_progress' AND jobq_tasks.attempt = anon_1.attempt AND NOT jobq_tasks.recurring RETURNING jobq_tasks.id), 
waiting AS 
(SELECT jobq_tasks.id AS id, jobq_tasks.priority AS priority, jobq_tasks.run_at AS run_at 
FROM jobq_tasks 
WHERE (jobq_tasks.status = 'queued' OR jobq_tasks.status = 'failed' AND jobq_tasks.retries_left > 0 OR jobq_tasks.status = 'done' AND jobq_tasks.recurring) AND jobq_tasks.run_at <= now() AND (jobq_tasks.lock_key IS NULL OR NOT (jobq_tasks.lock_key IN (SELECT running.lock_key 
FROM jobq_tasks AS running 
WHERE running.lock_key IS NOT NULL AND running.status = 'in_progress') OR (EXISTS (SELECT * 
FROM jobq_tasks AS earlier 
WHERE earlier.lock_key = jobq_tasks.lock_key AND earlier.lock_key IS NOT NULL AND (earlier.status = 'queued' OR earlier.status = 'failed' AND earlier.retries_left > 0 OR earlier.status = 'in_progress' OR earlier.status = 'done' AND earlier.recurring) AND earlier.id < jobq_tasks.id AND earlier.run_at <= now() AND (earlier.status = 'queued' OR earlier.status = 'failed' AND earlier.retries_left > 0 OR earlier.status = 'done' AND earlier.recurring))))) AND jobq_tasks.queue_id IN (%(queue_0)s::VARCHAR) AND (jobq_tasks.queue_id NOT IN (SELECT jobq_limits.queue 
FROM jobq_limits)) AND (jobq_tasks.id NOT IN (SELECT recorded.id 
FROM recorded)) ORDER BY jobq_tasks.priority DESC, jobq_tasks.run_at, jobq_tasks.id 
 LIMIT %(limit)s::INTEGER FOR UPDATE SKIP LOCKED), 
expired AS 
(SELECT jobq_tasks.id AS id, jobq_tasks.priority AS priority, jobq_tasks.run_at AS run_at 
FROM jobq_tasks 
WHERE jobq_tasks.status = 'in_progress' AND jobq_tasks.locked_until < now() AND jobq_tasks.retries_left > 0 AND NOT jobq_tasks.recurring AND jobq_tasks.cancel_requested_at IS NULL AND jobq_tasks.run_at <= now() AND (jobq_tasks.lock_key IS NULL OR NOT (EXISTS (SELECT * 
FROM jobq_tasks AS earlier 
WHERE earlier.lock_key = jobq_tasks.lock_key AND earlier.lock_key IS NOT NULL AND (earlier.status = 'queued' OR earlier.status = 'failed' AND earlier.retries_left > 0 OR earlier.status = 'in_progress' OR earlier.status = 'done' AND earlier.recurring) AND earlier.id < jobq_tasks.id AND earlier.run_at <= now() AND (earlier.status = 'queued' OR earlier.status = 'failed' AND earlier.retries_left > 0 OR earlier.status = 'done' AND earlier.recurring)))) AND jobq_tasks.queue_id IN (%(queue_0)s::VARCHAR) AND (jobq_tasks.queue_id NOT IN (SELECT jobq_limits.queue 
FROM jobq_limits)) AND (jobq_tasks.id NOT IN (SELECT recorded.id 
FROM recorded)) ORDER BY jobq_tasks.priority DESC, jobq_tasks.run_at, jobq_tasks.id 
 LIMIT %(limit)s::INTEGER FOR UPDATE SKIP LOCKED), 
picked AS 
(SELECT capturable.id AS id 
FROM (SELECT waiting.id AS id, waiting.priority AS priority, waiting.run_at AS run_at 
FROM waiting UNION ALL SELECT expired.id AS id, expired.priority AS priority, expired.run_at AS run_at 
FROM expired) AS capturable ORDER BY capturable.priority DESC, capturable.run_at, capturable.id 
 LIMIT %(limit)s::INTEGER), 
captured AS 
(UPDATE jobq_tasks SET status=%(param_7)s::VARCHAR, retries_left=CASE WHEN (jobq_tasks.status = 'failed' OR jobq_tasks.status = 'in_progress') THEN jobq_tasks.retries_left - %(retries_left_1)s::INTEGER ELSE jobq_tasks.retries_left END, attempt=(jobq_tasks.attempt + %(attempt_1)s::INTEGER), locked_by=%(worker_id)s::VARCHAR, locked_until=(now() + make_interval(%(make_interval_13)s::INTEGER, %(make_interval_14)s::INTEGER, %(make_interval_15)s::INTEGER, %(make_interval_16)s::INTEGER, %(make_interval_17)s::INTEGER, %(make_interval_18)s::INTEGER, coalesce(jobq_tasks.lease, %(lease_default)s))), started_at=now(), finished_at=%(param_8)s::TIMESTAMP WITH TIME ZONE WHERE jobq_tasks.id = ANY (array((SELECT picked.id 
FROM picked))) RETURNING jobq_tasks.id, jobq_tasks.queue_id, jobq_tasks.name, jobq_tasks.args, jobq_tasks.status, jobq_tasks.priority, jobq_tasks.run_at, jobq_tasks.retries_left, jobq_tasks.attempt, jobq_tasks.lease, jobq_tasks.timeout, jobq_tasks.locked_by, jobq_tasks.locked_until, jobq_tasks.unique_key, jobq_tasks.lock_key, jobq_tasks.result, jobq_tasks.error, jobq_tasks.recurring, jobq_tasks.created_at, jobq_tasks.started_at, jobq_tasks.finished_at, jobq_tasks.progress, jobq_tasks.cancel_requested_at, jobq_tasks.awaited, jobq_tasks.trace_context, jobq_tasks.workflow_id, jobq_tasks.fair_key)
 SELECT (SELECT count(*) AS count_1 
FROM recorded) AS applied, captured.id, captured.queue_id, captured.name, captured.args, captured.status, captured.priority, captured.run_at, captured.retries_left, captured.attempt, captured.lease, captured.timeout, captured.locked_by, captured.locked_until, captured.unique_key, captured.lock_key, captured.result, captured.error, captured.recurring, captured.created_at, captured.started_at, captured.finished_at, captured.progress, captured.cancel_requested_at, captured.awaited, captured.trace_context, captured.workflow_id, captured.fair_key 
FROM (SELECT %(param_6)s::INTEGER AS one) AS one LEFT OUTER JOIN captured ON true;

-- stale end
UPDATE jobq_tasks SET status=%(status)s::VARCHAR, locked_by=%(locked_by)s::VARCHAR, locked_until=%(locked_until)s::TIMESTAMP WITH TIME ZONE, result=%(new_result)s::JSON, error=%(error)s::VARCHAR, finished_at=now() WHERE jobq_tasks.id = %(task_id)s::BIGINT AND jobq_tasks.status = 'in_progress' AND jobq_tasks.attempt = %(run_attempt)s::INTEGER AND NOT jobq_tasks.recurring AND jobq_tasks.workflow_id IS NULL;
UPDATE jobq_tasks SET status=%(status)s::VARCHAR, locked_by=%(locked_by)s::VARCHAR, locked_until=%(locked_until)s::TIMESTAMP WITH TIME ZONE, result=%(new_result)s::JSON, error=%(error)s::VARCHAR, finished_at=now() WHERE jobq_tasks.id = %(task_id)s::BIGINT AND jobq_tasks.status = 'in_progress' AND jobq_tasks.attempt = %(run_attempt)s::INTEGER AND NOT jobq_tasks.recurring AND jobq_tasks.workflow_id IS NOT NULL;
SELECT jobq_tasks.id, jobq_tasks.attempt, jobq_tasks.retries_left, jobq_tasks.run_at, jobq_tasks.started_at, jobq_schedules.name, jobq_schedules.cron, jobq_schedules.timezone, jobq_schedules.retries, jobq_schedules.enabled, jobq_schedules.defined, jobq_schedules.lock_key AS defined_lock_key 
FROM jobq_tasks LEFT OUTER JOIN jobq_schedules ON jobq_schedules.task_id = jobq_tasks.id 
WHERE jobq_tasks.recurring AND jobq_tasks.status = 'in_progress' AND (jobq_tasks.id, jobq_tasks.attempt) IN ((%(fences_1_1)s, %(fences_1_2)s));

-- rescue
UPDATE jobq_tasks SET status=CASE WHEN (jobq_tasks.cancel_requested_at IS NOT NULL) THEN %(param_1)s::VARCHAR ELSE %(param_2)s::VARCHAR END, run_at=CASE WHEN (jobq_tasks.retries_left > %(retries_left_1)s::INTEGER AND jobq_tasks.cancel_requested_at IS NULL) THEN now() ELSE jobq_tasks.run_at END, locked_by=%(locked_by)s::VARCHAR, locked_until=%(locked_until)s::TIMESTAMP WITH TIME ZONE, error=CASE WHEN (jobq_tasks.cancel_requested_at IS NOT NULL) THEN %(param_3)s::VARCHAR ELSE %(param_4)s::VARCHAR END, finished_at=CASE WHEN (jobq_tasks.retries_left > %(retries_left_1)s::INTEGER AND jobq_tasks.cancel_requested_at IS NULL) THEN NULL ELSE now() END WHERE jobq_tasks.status = %(status_1)s::VARCHAR AND jobq_tasks.locked_until < now() AND NOT jobq_tasks.recurring;
SELECT jobq_tasks.id, jobq_tasks.attempt 
FROM jobq_tasks 
WHERE jobq_tasks.status = 'in_progress' AND jobq_tasks.locked_until < now() AND jobq_tasks.recurring;

