-- The service's SQLite file as the release before schema versions wrote it (user_version 0):
-- every table the stores of commit 268899c created, after the rounds of
-- tests/history/test_history.feed went through build_pipeline with default settings (an Xid
-- alert, its notification and dry-run action), dumped with sqlite3's iterdump and trimmed to
-- at most 3 rows a table. Loaded by tests/storage/test_schema_versions.py to test the upgrade.
BEGIN TRANSACTION;
CREATE TABLE actions (
    id TEXT PRIMARY KEY, kind TEXT NOT NULL CHECK (kind IN ('migrate', 'release')),
    episode TEXT NOT NULL, node TEXT NOT NULL, alert_id INTEGER NOT NULL,
    fingerprint TEXT NOT NULL, summary TEXT NOT NULL, mode TEXT NOT NULL, state TEXT NOT NULL,
    requested_at REAL NOT NULL, deadline REAL, level INTEGER NOT NULL, risk REAL NOT NULL,
    approved_at REAL, attempts INTEGER NOT NULL, next_try_at REAL, started_at REAL,
    finished_at REAL, plan TEXT NOT NULL, result TEXT, actor TEXT,
    abort_requested INTEGER NOT NULL, drained INTEGER NOT NULL, refusals TEXT NOT NULL,
    UNIQUE (node, fingerprint, kind, episode)
);
INSERT INTO "actions" VALUES('act-a84931f53676362239e5','migrate','1','n0',1,'4d613d55f76a09c8','n0:gpu0 on n0: risk 1.00 (xid: Xid code logged in the last 60 min = 79)','dry_run','dry_run',1699999220.0,NULL,3,1.0,NULL,0,NULL,NULL,1699999220.0,'[{"call": "scontrol show node -o n0", "ok": true, "detail": "check the name is exactly one known node", "duration_s": 0.0}, {"call": "scontrol update NodeName=n0 State=DRAIN ''Reason=gpuhealth:1:n0:gpu0 on n0: risk 1.00 (xid: Xid code logged in the last 60 min = 79)''", "ok": true, "detail": "drain: no new jobs", "duration_s": 0.0}, {"call": "squeue -h --nodelist=n0 -t CONFIGURING,RUNNING,STOPPED,SUSPENDED -O ''JobID:|,State:|,Requeue:|,BatchFlag:|''", "ok": true, "detail": "list the jobs on the node", "duration_s": 0.0}, {"call": "scontrol requeue Incomplete ''<job ids>''", "ok": true, "detail": "requeue the listed jobs with Requeue=1 and BatchFlag=1; the others are reported, not touched", "duration_s": 0.0}]','{"would_execute": false, "detail": "would be refused: breaker: circuit breaker open: 1 of 1 nodes in 1800 s would exceed max_fraction=0.1"}',NULL,0,0,'[]');
CREATE TABLE alert_events (
    alert_id INTEGER NOT NULL REFERENCES alerts (id),
    at REAL NOT NULL,
    old_level INTEGER NOT NULL,
    new_level INTEGER NOT NULL,
    risk REAL NOT NULL
);
INSERT INTO "alert_events" VALUES(1,1699999220.0,0,3,1.0);
CREATE TABLE alerts (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    entity TEXT NOT NULL,
    scope TEXT NOT NULL,
    node TEXT NOT NULL,
    level INTEGER NOT NULL,
    peak_level INTEGER NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('firing', 'resolved')),
    risk REAL NOT NULL,
    started_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    resolved_at REAL,
    explanation TEXT NOT NULL,
    alertname TEXT NOT NULL DEFAULT '',
    flapping INTEGER NOT NULL DEFAULT 0,
    stale INTEGER NOT NULL DEFAULT 0,
    corroborated INTEGER NOT NULL DEFAULT 0,
    acked_by TEXT,
    acked_at REAL,
    ack_comment TEXT
);
INSERT INTO "alerts" VALUES(1,'n0:gpu0','gpu','n0',3,3,'firing',1.0,1699999220.0,1699999220.0,NULL,'[{"rule": "xid", "signal": "Xid code logged in the last 60 min", "value": 79.0, "threshold": null, "risk": 1.0, "hard": true}]','GpuFailureRisk',0,0,1,NULL,NULL,NULL);
CREATE TABLE api_idempotency (
    principal TEXT NOT NULL,
    key TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    status INTEGER,
    headers TEXT,
    body BLOB,
    created_at REAL NOT NULL,
    PRIMARY KEY (principal, key)
);
CREATE TABLE api_tokens (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    scope TEXT NOT NULL,
    secret_sha256 TEXT NOT NULL,
    created_at REAL NOT NULL,
    expires_at REAL,
    revoked_at REAL,
    last_used_at REAL
);
CREATE TABLE audit (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, at REAL NOT NULL, actor TEXT NOT NULL,
    action_id TEXT, node TEXT, event TEXT NOT NULL, mode TEXT, dry_run INTEGER NOT NULL,
    steps TEXT NOT NULL, result TEXT NOT NULL, duration_s REAL
);
INSERT INTO "audit" VALUES(1,1699999220.0,'gpuhealth','act-a84931f53676362239e5','n0','dry_run','dry_run',1,'[{"call": "scontrol show node -o n0", "ok": true, "detail": "check the name is exactly one known node", "duration_s": 0.0}, {"call": "scontrol update NodeName=n0 State=DRAIN ''Reason=gpuhealth:1:n0:gpu0 on n0: risk 1.00 (xid: Xid code logged in the last 60 min = 79)''", "ok": true, "detail": "drain: no new jobs", "duration_s": 0.0}, {"call": "squeue -h --nodelist=n0 -t CONFIGURING,RUNNING,STOPPED,SUSPENDED -O ''JobID:|,State:|,Requeue:|,BatchFlag:|''", "ok": true, "detail": "list the jobs on the node", "duration_s": 0.0}, {"call": "scontrol requeue Incomplete ''<job ids>''", "ok": true, "detail": "requeue the listed jobs with Requeue=1 and BatchFlag=1; the others are reported, not touched", "duration_s": 0.0}]','would be refused: breaker: circuit breaker open: 1 of 1 nodes in 1800 s would exceed max_fraction=0.1',NULL);
CREATE TABLE breaker_state (
    id INTEGER PRIMARY KEY CHECK (id = 1), state TEXT NOT NULL CHECK (state IN ('closed', 'open')),
    reason TEXT NOT NULL, tripped_at REAL, tripped_by TEXT, reset_at REAL, reset_by TEXT
);
INSERT INTO "breaker_state" VALUES(1,'closed','',NULL,NULL,NULL,NULL);
CREATE TABLE breaker_window (
    node TEXT NOT NULL, action_id TEXT NOT NULL, at REAL NOT NULL
);
CREATE TABLE deliveries (at REAL, receiver TEXT, reason TEXT, group_key TEXT, level INTEGER, status TEXT, alerts INTEGER, title TEXT, body TEXT);
INSERT INTO "deliveries" VALUES(1699999220.0,'record','new','0:{node=''n0''}',3,'firing',1,'[FIRING:1] level 3 critical on n0: n0:gpu0','[{"fingerprint": "4d613d55f76a09c8", "alert_id": 1, "status": "firing", "level": 3, "labels": {"alertname": "GpuFailureRisk", "cluster": "default", "node": "n0", "entity": "n0:gpu0", "scope": "gpu", "level": "3", "severity": "critical", "signal": "xid"}, "summary": "n0:gpu0 on n0: risk 1.00 (xid: Xid code logged in the last 60 min = 79)"}]');
CREATE TABLE events (ts REAL NOT NULL, entity TEXT NOT NULL, metric TEXT NOT NULL, value REAL NOT NULL);
INSERT INTO "events" VALUES(1699999216.0,'n0:gpu0','xid',79.0);
INSERT INTO "events" VALUES(1699999221.0,'n0:gpu0','xid',79.0);
CREATE TABLE gpu_samples (ts REAL NOT NULL, entity TEXT NOT NULL, node TEXT NOT NULL, gpu_temp REAL, mem_temp REAL, gpu_slowdown_temp REAL, gpu_shutdown_temp REAL, mem_max_temp REAL, gpu_temp_margin REAL, power_draw REAL, sm_clock REAL, gpu_util REAL, ecc_sbe_volatile REAL, ecc_dbe_volatile REAL, ecc_sbe_aggregate REAL, ecc_dbe_aggregate REAL, ecc_sram_correctable REAL, retired_pages_sbe REAL, retired_pages_dbe REAL, retired_pages_pending REAL, remapped_rows_correctable REAL, remapped_rows_uncorrectable REAL, remapped_rows_pending REAL, remapped_rows_failure REAL, pcie_replay REAL, throttle_thermal REAL, throttle_power REAL, throttle_hw_slowdown REAL);
INSERT INTO "gpu_samples" VALUES(1699999200.0,'n0:gpu0','n0',50.0,60.0,87.0,92.0,95.0,30.0,500.0,1980.0,90.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0);
INSERT INTO "gpu_samples" VALUES(1699999200.0,'n0:gpu1','n0',55.0,60.0,87.0,92.0,95.0,30.0,500.0,1980.0,90.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0);
INSERT INTO "gpu_samples" VALUES(1699999205.0,'n0:gpu0','n0',51.0,60.0,87.0,92.0,95.0,30.0,500.0,1980.0,90.0,2.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0);
CREATE TABLE ib_port_samples (ts REAL NOT NULL, entity TEXT NOT NULL, node TEXT NOT NULL, ib_symbol_error REAL, ib_link_error_recovery REAL, ib_link_downed REAL, ib_port_rcv_errors REAL, ib_local_link_integrity_errors REAL, ib_excessive_buffer_overrun_errors REAL, ib_port_rcv_data REAL, ib_port_xmit_data REAL, ib_state REAL, ib_phys_state REAL, ib_rate REAL, ib_link_flaps REAL);
INSERT INTO "ib_port_samples" VALUES(1699999200.0,'n0:mlx5_0:1','n0',1.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,4.0,0.0,400.0,0.0);
INSERT INTO "ib_port_samples" VALUES(1699999205.0,'n0:mlx5_0:1','n0',2.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,4.0,0.0,400.0,0.0);
INSERT INTO "ib_port_samples" VALUES(1699999210.0,'n0:mlx5_0:1','n0',3.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,4.0,0.0,400.0,0.0);
CREATE TABLE nflog (
    receiver TEXT NOT NULL,
    group_key TEXT NOT NULL,
    firing TEXT NOT NULL,
    resolved TEXT NOT NULL,
    sent_at REAL NOT NULL,
    PRIMARY KEY (receiver, group_key)
);
INSERT INTO "nflog" VALUES('record','0:{node=''n0''}','{"4d613d55f76a09c8": [3, 1]}','[]',1699999220.0);
CREATE TABLE nvlink_samples (ts REAL NOT NULL, entity TEXT NOT NULL, node TEXT NOT NULL, nvlink_crc_flit REAL, nvlink_crc_data REAL, nvlink_replay REAL, nvlink_recovery REAL, nvlink_state REAL);
INSERT INTO "nvlink_samples" VALUES(1699999200.0,'n0:gpu0:nvlink0','n0',3.0,0.0,0.0,0.0,1.0);
INSERT INTO "nvlink_samples" VALUES(1699999200.0,'n0:gpu1:nvlink0','n0',0.0,0.0,0.0,0.0,1.0);
INSERT INTO "nvlink_samples" VALUES(1699999205.0,'n0:gpu0:nvlink0','n0',6.0,0.0,0.0,0.0,1.0);
CREATE TABLE replay_progress (
    trace TEXT PRIMARY KEY,
    identity TEXT NOT NULL,
    at REAL NOT NULL,          -- data time of the newest scored tick
    updated_at REAL NOT NULL   -- wall time it was saved
);
CREATE TABLE silences (
    id TEXT PRIMARY KEY,
    matchers TEXT NOT NULL,
    author TEXT NOT NULL,
    comment TEXT NOT NULL,
    created_at REAL NOT NULL,
    starts_at REAL NOT NULL,
    ends_at REAL NOT NULL,
    expired_by TEXT
);
CREATE INDEX alerts_open ON alerts (state, entity);
CREATE INDEX alerts_node ON alerts (node, started_at);
CREATE INDEX actions_state ON actions (state, requested_at);
CREATE INDEX actions_node ON actions (node, started_at);
CREATE INDEX audit_action ON audit (action_id, event);
CREATE TRIGGER audit_no_update BEFORE UPDATE ON audit
BEGIN SELECT RAISE(ABORT, 'audit is append-only'); END;
CREATE TRIGGER audit_no_delete BEFORE DELETE ON audit
BEGIN SELECT RAISE(ABORT, 'audit is append-only'); END;
CREATE INDEX breaker_window_at ON breaker_window (at);
CREATE INDEX gpu_by_entity ON gpu_samples (entity, ts);
CREATE UNIQUE INDEX gpu_samples_point ON gpu_samples (entity, ts);
CREATE INDEX nvlink_by_entity ON nvlink_samples (entity, ts);
CREATE UNIQUE INDEX nvlink_samples_point ON nvlink_samples (entity, ts);
CREATE INDEX ib_port_by_entity ON ib_port_samples (entity, ts);
CREATE UNIQUE INDEX ib_port_samples_point ON ib_port_samples (entity, ts);
CREATE INDEX api_idempotency_created ON api_idempotency (created_at);
DELETE FROM "sqlite_sequence";
INSERT INTO "sqlite_sequence" VALUES('alerts',1);
INSERT INTO "sqlite_sequence" VALUES('audit',1);
COMMIT;
