-- Finished jobs are deleted after a retention period (`PgQueue::reap`): found
-- by when they finished, without scanning the queue.
CREATE INDEX jobs_finished_at ON jobs (finished_at) WHERE finished_at IS NOT NULL;
