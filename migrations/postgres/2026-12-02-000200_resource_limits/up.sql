-- How a replica holds its runs to their jobs' resource limits: "cgroup v2"
-- (a cgroup of their own) or "rlimits"; NULL for a scheduler run as a
-- library, or a replica of an earlier release.
ALTER TABLE replicron_instances ADD COLUMN IF NOT EXISTS resource_limits TEXT;
