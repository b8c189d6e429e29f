-- supportbench results registry, schema version 1.
-- Every table is keyed by run_key (sha256 of the canonical RunSpec) or decision hash.
CREATE TABLE IF NOT EXISTS schema_migrations (
    version     INTEGER PRIMARY KEY,
    applied_at  TIMESTAMP NOT NULL
);
CREATE TABLE IF NOT EXISTS experiments (
    experiment  VARCHAR PRIMARY KEY,
    first_seen  TIMESTAMP NOT NULL
);
CREATE TABLE IF NOT EXISTS runs (
    run_key         VARCHAR PRIMARY KEY,
    experiment      VARCHAR NOT NULL,
    benchmark       VARCHAR NOT NULL,
    field           VARCHAR NOT NULL,
    objective       VARCHAR NOT NULL,
    method          VARCHAR NOT NULL,
    variant         VARCHAR NOT NULL,
    seed            BIGINT NOT NULL,
    split           VARCHAR NOT NULL,
    budget          DOUBLE,
    horizon         INTEGER,               -- T
    checkpoint      INTEGER,               -- t (DIR-R)
    d               INTEGER,
    rho_p           DOUBLE,
    model           VARCHAR,
    hyperparameters JSON,
    origin          VARCHAR NOT NULL,      -- 'record' (run file) or 'import' (outcome table)
    source          VARCHAR NOT NULL,      -- file the row came from
    content_hash    VARCHAR NOT NULL,      -- md5 of the record file / imported row
    ingest_seq      BIGINT NOT NULL,       -- ingestion order (deduplication keeps the first)
    ingested_at     TIMESTAMP NOT NULL,
    build           BIGINT NOT NULL DEFAULT 0   -- the theta_0 build (RunSpec.build)
);
-- columns added within schema version 1: older files gain them (before the views below read them)
ALTER TABLE runs ADD COLUMN IF NOT EXISTS build BIGINT DEFAULT 0;
-- Child tables hold at most one row per run (ingest guarantees it); no index: it would double the
-- cost of every ingest for no lookup that needs it.
CREATE TABLE IF NOT EXISTS outcomes (
    run_key          VARCHAR NOT NULL,
    status           VARCHAR NOT NULL CHECK (status IN ('ok', 'failed', 'diverged')),
    error            VARCHAR,
    J                DOUBLE,
    G_F              DOUBLE,
    D_coll           DOUBLE,
    components       JSON,
    step_equivalents DOUBLE,
    wall_s           JSON
);
-- A run's curve (eval_every > 0): [{step, J, G_F, D_coll, components}], NULL without one; read long in metrics.
ALTER TABLE outcomes ADD COLUMN IF NOT EXISTS curve JSON;
CREATE TABLE IF NOT EXISTS supports (
    run_key  VARCHAR NOT NULL,
    n_groups INTEGER,
    cost     BIGINT,
    budget   BIGINT,
    groups   INTEGER[]
);
CREATE TABLE IF NOT EXISTS decisions (
    hash              VARCHAR PRIMARY KEY,
    tau               DOUBLE,
    rho_p             DOUBLE,
    d                 INTEGER,
    checkpoint        INTEGER,             -- t
    horizon           INTEGER,             -- T
    actions           DOUBLE[],
    admissible_lo     DOUBLE,
    admissible_hi     DOUBLE,
    calibration_seeds BIGINT[],
    baselines         VARCHAR[],
    benchmark         VARCHAR,
    objective         VARCHAR,
    selection         VARCHAR,
    frozen_at         TIMESTAMP NOT NULL,
    content           JSON,
    source            VARCHAR
);
CREATE TABLE IF NOT EXISTS gate_events (
    run_key         VARCHAR NOT NULL,
    decision_hash   VARCHAR,
    tau             DOUBLE,
    probe_signal    DOUBLE,
    triggered       BOOLEAN,
    chosen_rho      DOUBLE,
    selection       VARCHAR,
    post_hoc        BOOLEAN,
    complete        BOOLEAN,
    unfrozen        BOOLEAN,
    rho0_J          DOUBLE,
    available_gain  DOUBLE
);
CREATE TABLE IF NOT EXISTS candidates (
    run_key VARCHAR NOT NULL,
    rho     DOUBLE NOT NULL,
    V       DOUBLE,
    J       DOUBLE
);
CREATE TABLE IF NOT EXISTS calibration (
    decision_hash VARCHAR NOT NULL,
    run_key       VARCHAR NOT NULL,
    field         VARCHAR,
    seed          BIGINT,
    s             DOUBLE,
    gamma         DOUBLE,
    PRIMARY KEY (decision_hash, run_key)
);
CREATE TABLE IF NOT EXISTS provenance (
    run_key      VARCHAR NOT NULL,
    supportbench VARCHAR,
    git          VARCHAR,
    torch        VARCHAR,
    transformers VARCHAR,
    data_hash    VARCHAR,
    model_hash   VARCHAR,
    started_at   TIMESTAMP,
    finished_at  TIMESTAMP,
    fingerprint  VARCHAR,               -- hash of the code behind the run (method, objective, benchmark)
    cpu_mode     VARCHAR                -- the CPU kernels it computed with (supportbench._cpumode); NULL: unknown
);
-- Every stored record that ingest replaced, and why: a replacement is a recorded act, never silent.
CREATE TABLE IF NOT EXISTS replacements (
    run_key          VARCHAR NOT NULL,
    reason           VARCHAR NOT NULL CHECK (reason IN ('retry', 'post_hoc', 'rerun')),
    old_content_hash VARCHAR NOT NULL,
    new_content_hash VARCHAR NOT NULL,
    source           VARCHAR NOT NULL,
    replaced_at      TIMESTAMP NOT NULL
);
CREATE TABLE IF NOT EXISTS ingest_conflicts (
    run_key      VARCHAR NOT NULL,
    source       VARCHAR NOT NULL,
    content_hash VARCHAR NOT NULL,
    seen_at      TIMESTAMP NOT NULL,
    PRIMARY KEY (run_key, content_hash)
);
-- What ingest accepted, append-only and hash-chained (registry.ledger): one row per new run, replaced run,
-- imported row and decision, stamped by the registry's own clock; hash = sha256(prev, seq, logged_at, kind, key,
-- content_hash). The audit recomputes the chain and checks every stored row against its last entry.
CREATE TABLE IF NOT EXISTS ingest_log (
    seq          BIGINT PRIMARY KEY,
    logged_at    TIMESTAMP NOT NULL,       -- the registry's clock
    kind         VARCHAR NOT NULL CHECK (kind IN ('run', 'replacement', 'import', 'decision')),
    key          VARCHAR NOT NULL,         -- run_key or decision hash
    content_hash VARCHAR NOT NULL,         -- run_digests.digest or decision_digests.digest when accepted
    prev         VARCHAR NOT NULL,
    hash         VARCHAR NOT NULL
);
-- Outcome components in long form, derived from outcomes.components (not stored twice), under the names a
-- record stores (forget_prob); the metrics view below, api.Registry.components() and every report show them
-- under the one vocabulary (open-unlearning's names: forget_Q_A_Prob).
CREATE OR REPLACE VIEW components AS
SELECT o.run_key, je.key AS name, TRY_CAST(je.value AS DOUBLE) AS value
FROM outcomes o, json_each(o.components) je;
-- Metric names: open-unlearning's where it has one (configs/eval/tofu_metrics/*.yaml), else the component's own.
-- The rows come from experiments/metric_names.py (registry/store.py fills them in), the one place the
-- mapping is written, which `run` prints with too: import reads it back (an imported forget_Q_A_ROUGE is stored as the
-- component forget_rouge, so reports that read components see record and imported runs alike).
CREATE OR REPLACE VIEW metric_names AS
SELECT * FROM (VALUES
    {METRIC_NAMES}
) AS t(component, name);
-- Every metric of every run beyond J, G_F and D_coll, long: (run_key, name, value). Record and imported runs
-- keep their metrics in outcomes.components (covered by the ingest log's digest); this is their one reading,
-- under open-unlearning's names. Export writes it, import stores it back. One row per (run_key, name): a run whose
-- components hold both a name and its alias (forget_Q_A_Prob and forget_prob) shows the value stored under
-- open-unlearning's name. A NULL or non-finite value is not a metric and is left out (docs/registry.md).
-- step: NULL for the terminal model's metrics (the rows above); a curve's points (eval_every) follow with
-- their step, J, G_F and D_coll among their names, on the curve's evaluation slice (docs/reports.md, "Curves").
CREATE OR REPLACE VIEW metrics AS
SELECT run_key, name, value, NULL::BIGINT AS step FROM (
    SELECT c.run_key, coalesce(n.name, c.name) AS name, c.value, n.name IS NULL AS under_own_name
    FROM components c LEFT JOIN metric_names n ON n.component = c.name
    WHERE c.value IS NOT NULL AND isfinite(c.value))
QUALIFY row_number() OVER (PARTITION BY run_key, name ORDER BY under_own_name DESC) = 1
UNION ALL
SELECT run_key, coalesce(n.name, v.name) AS name, v.value, v.step FROM (
    SELECT o.run_key, (p.value->>'step')::BIGINT AS step, m.key AS name, TRY_CAST(m.value AS DOUBLE) AS value
    FROM outcomes o, json_each(o.curve) p,
         json_each(json_merge_patch(p.value->'components',
                   json_object('J', p.value->'J', 'G_F', p.value->'G_F', 'D_coll', p.value->'D_coll'))) m
    WHERE o.curve IS NOT NULL) v
LEFT JOIN metric_names n ON n.component = v.name
WHERE v.value IS NOT NULL AND isfinite(v.value);
-- Every run, J or not (an imported run may carry metrics only: J NULL). The audit and export read this.
CREATE OR REPLACE VIEW results_all AS
SELECT r.run_key, r.experiment, r.benchmark, r.build, r.field, r.objective, r.method, r.variant, r.seed, r.split,
       o.status, o.error, o.J, o.G_F, o.D_coll, o.step_equivalents,
       g.triggered, g.probe_signal, g.chosen_rho, g.available_gain, g.rho0_J, g.selection, g.post_hoc,
       g.complete, g.decision_hash, r.origin, r.ingest_seq
FROM runs r JOIN outcomes o USING (run_key) LEFT JOIN gate_events g USING (run_key);
-- What the J analysis reads: every run except an ok one without J (an import of metrics only), which has no
-- place in a J statistic; it stays in results_all, metrics and the audit.
CREATE OR REPLACE VIEW results AS
SELECT * FROM results_all WHERE NOT (status = 'ok' AND J IS NULL);
-- What the ingest log vouches for: a digest of every stored value a table, figure or audit reads (the file's
-- content hash, the cell, the outcome, the gate, the start time and fingerprint; available_gain is derived).
CREATE OR REPLACE VIEW run_digests AS
SELECT r.run_key, md5(concat_ws('|', r.run_key, r.content_hash, r.experiment, r.benchmark, r.field, r.objective,
         r.method, r.variant, r.seed, r.split, coalesce(o.status, '-'), coalesce(o.J::VARCHAR, '-'),
         coalesce(o.G_F::VARCHAR, '-'), coalesce(o.D_coll::VARCHAR, '-'), coalesce(o.components::VARCHAR, '-'),
         coalesce(g.decision_hash, '-'), coalesce(g.tau::VARCHAR, '-'), coalesce(g.probe_signal::VARCHAR, '-'),
         coalesce(g.triggered::VARCHAR, '-'), coalesce(g.chosen_rho::VARCHAR, '-'), coalesce(g.unfrozen::VARCHAR, '-'),
         coalesce(p.started_at::VARCHAR, '-'), coalesce(p.fingerprint, '-'),
         -- a curve adds its text; a run without one adds nothing (NULL): older digests still hold
         o.curve::VARCHAR,
         -- build 0 adds nothing (concat_ws skips NULL): the digests logged before builds existed still hold
         nullif(r.build, 0)::VARCHAR)) AS digest
FROM runs r LEFT JOIN outcomes o USING (run_key) LEFT JOIN gate_events g USING (run_key)
     LEFT JOIN provenance p USING (run_key);
CREATE OR REPLACE VIEW decision_digests AS
SELECT hash, md5(concat_ws('|', hash, coalesce(tau::VARCHAR, '-'), coalesce(rho_p::VARCHAR, '-'),
         coalesce(d::VARCHAR, '-'), coalesce(checkpoint::VARCHAR, '-'), coalesce(horizon::VARCHAR, '-'),
         coalesce(benchmark, '-'), coalesce(objective, '-'), frozen_at::VARCHAR, coalesce(content::VARCHAR, '-')))
       AS digest
FROM decisions;
