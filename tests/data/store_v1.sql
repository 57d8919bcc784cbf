-- quicack store, schema version 1.
-- The single source of truth for the DuckDB tables; documented column by column in schemas/README.md.
-- Units live in column names: *_ms milliseconds, *_bytes bytes, epoch_ms milliseconds since 1970-01-01 UTC.

CREATE TABLE IF NOT EXISTS store_meta (
    key   VARCHAR PRIMARY KEY,
    value VARCHAR NOT NULL
);

CREATE TABLE IF NOT EXISTS files (
    file_id          BIGINT PRIMARY KEY,
    path             VARCHAR NOT NULL,
    content_sha256   VARCHAR NOT NULL,
    size_bytes       BIGINT NOT NULL,
    format           VARCHAR NOT NULL,
    qlog_version     VARCHAR,
    analysis_version INTEGER NOT NULL,
    ingested_at      TIMESTAMP NOT NULL,
    events           BIGINT NOT NULL,
    warnings         VARCHAR[] NOT NULL
);

CREATE TABLE IF NOT EXISTS connections (
    connection_id      BIGINT PRIMARY KEY,
    file_id            BIGINT NOT NULL,
    trace_index        INTEGER NOT NULL,
    group_id           VARCHAR,
    vantage            VARCHAR NOT NULL,
    flow               VARCHAR,
    implementation     VARCHAR NOT NULL,
    odcid              VARCHAR,
    title              VARCHAR,
    reference_epoch_ms DOUBLE,
    first_event_epoch_ms DOUBLE,
    duration_ms        DOUBLE,
    events             BIGINT NOT NULL,
    quirks             VARCHAR[] NOT NULL
);

CREATE TABLE IF NOT EXISTS packets (
    connection_id       BIGINT NOT NULL,
    event_index         BIGINT NOT NULL,
    time_ms             DOUBLE NOT NULL,
    epoch_ms            DOUBLE,
    direction           VARCHAR NOT NULL,
    sender              VARCHAR NOT NULL,
    packet_type         VARCHAR NOT NULL,
    packet_number_space VARCHAR,
    packet_number       BIGINT,
    size_bytes          INTEGER,
    datagram_id         BIGINT NOT NULL,
    ack_eliciting       BOOLEAN,
    frame_count         INTEGER NOT NULL
);

CREATE TABLE IF NOT EXISTS frames (
    connection_id          BIGINT NOT NULL,
    event_index            BIGINT NOT NULL,
    position               INTEGER NOT NULL,
    frame_type             VARCHAR NOT NULL,
    ack_delay_ms           DOUBLE,
    ack_delay_raw          BIGINT,
    largest_acknowledged   BIGINT,
    acked_ranges           BIGINT[][],
    ecn_ce                 BIGINT,
    offset_bytes           BIGINT,
    length_bytes           BIGINT,
    stream_id              BIGINT,
    fin                    BOOLEAN,
    sequence_number        BIGINT,
    ack_eliciting_threshold BIGINT,
    request_max_ack_delay_ms DOUBLE,
    reordering_threshold   BIGINT,
    details                JSON
);

CREATE TABLE IF NOT EXISTS transport_parameters (
    connection_id        BIGINT NOT NULL,
    owner                VARCHAR NOT NULL,
    endpoint             VARCHAR NOT NULL,
    time_ms              DOUBLE NOT NULL,
    max_ack_delay_ms     DOUBLE,
    ack_delay_exponent   INTEGER,
    min_ack_delay_ms     DOUBLE,
    initial_max_data_bytes BIGINT,
    max_udp_payload_size_bytes BIGINT,
    max_idle_timeout_ms  DOUBLE,
    active_connection_id_limit BIGINT,
    parameters           JSON NOT NULL
);

CREATE TABLE IF NOT EXISTS logged_metrics (
    connection_id     BIGINT NOT NULL,
    event_index       BIGINT NOT NULL,
    time_ms           DOUBLE NOT NULL,
    latest_rtt_ms     DOUBLE,
    min_rtt_ms        DOUBLE,
    smoothed_rtt_ms   DOUBLE,
    rtt_variance_ms   DOUBLE,
    pto_count         INTEGER,
    congestion_window_bytes BIGINT,
    bytes_in_flight_bytes   BIGINT
);

CREATE TABLE IF NOT EXISTS lost_packets (
    connection_id       BIGINT NOT NULL,
    event_index         BIGINT NOT NULL,
    time_ms             DOUBLE NOT NULL,
    packet_type         VARCHAR,
    packet_number_space VARCHAR,
    packet_number       BIGINT,
    trigger             VARCHAR
);

CREATE TABLE IF NOT EXISTS dropped_packets (
    connection_id       BIGINT NOT NULL,
    event_index         BIGINT NOT NULL,
    time_ms             DOUBLE NOT NULL,
    packet_type         VARCHAR,
    packet_number       BIGINT,
    size_bytes          INTEGER,
    trigger             VARCHAR
);

CREATE TABLE IF NOT EXISTS timers (
    connection_id       BIGINT NOT NULL,
    event_index         BIGINT NOT NULL,
    time_ms             DOUBLE NOT NULL,
    timer_type          VARCHAR,
    event_type          VARCHAR,
    packet_number_space VARCHAR,
    delta_ms            DOUBLE
);

CREATE TABLE IF NOT EXISTS other_events (
    connection_id BIGINT NOT NULL,
    event_index   BIGINT NOT NULL,
    time_ms       DOUBLE,
    event_name    VARCHAR NOT NULL,
    data          JSON
);
