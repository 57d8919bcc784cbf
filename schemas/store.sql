-- quicack store, schema version 10.
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
    quirks             VARCHAR[] NOT NULL,
    -- handshake classification (quicack/core/classify.py); times *_ms after the client's first Initial
    handshake_class    VARCHAR,
    handshake_reason   VARCHAR,
    handshake_notes    VARCHAR[],
    ack_sh_gap_ms      DOUBLE,
    first_ack_event_index BIGINT,
    server_hello_event_index BIGINT,
    first_ack_packet_number BIGINT,
    first_ack_frames   VARCHAR,
    first_ack_largest_acknowledged BIGINT,
    first_ack_acknowledges_first_initial BOOLEAN,
    first_ack_delay_ms DOUBLE,
    first_ack_delay_exponent INTEGER,
    clienthello_packets INTEGER,
    first_server_packet_ms DOUBLE,
    server_hello_ms    DOUBLE,
    handshake_complete_ms DOUBLE,
    handshake_done_ms  DOUBLE,
    first_response_byte_ms DOUBLE,
    server_max_ack_delay_ms DOUBLE,
    server_ack_delay_exponent INTEGER,
    server_min_ack_delay_ms DOUBLE,
    ack_frequency_supported BOOLEAN,
    -- RFC 9002 replay (quicack/core/recovery.py), one row per sample in rtt_samples
    replay_endpoint    VARCHAR,
    replay_samples     INTEGER,
    first_rtt_sample_ms DOUBLE,
    first_pto_ms       DOUBLE,
    counterfactual_first_pto_ms DOUBLE,
    replay_notes       VARCHAR[]
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

CREATE TABLE IF NOT EXISTS careful_resume_phases (
    connection_id                 BIGINT NOT NULL,
    event_index                   BIGINT NOT NULL,
    time_ms                       DOUBLE,
    event_name                    VARCHAR NOT NULL,
    old_phase                     VARCHAR,
    new_phase                     VARCHAR,
    trigger                       VARCHAR,
    logged_trigger                VARCHAR,
    pipesize_bytes                BIGINT,
    first_unvalidated_packet      BIGINT,
    last_unvalidated_packet       BIGINT,
    congestion_window_bytes       BIGINT,
    ssthresh_bytes                BIGINT,
    saved_congestion_window_bytes BIGINT,
    saved_rtt_ms                  DOUBLE
);

CREATE TABLE IF NOT EXISTS rtt_samples (
    connection_id        BIGINT NOT NULL,
    event_index          BIGINT NOT NULL,
    time_ms              DOUBLE NOT NULL,
    packet_number_space  VARCHAR NOT NULL,
    largest_acknowledged BIGINT NOT NULL,
    latest_rtt_ms        DOUBLE NOT NULL,
    ack_delay_ms         DOUBLE,
    ack_delay_used_ms    DOUBLE NOT NULL,
    adjusted_rtt_ms      DOUBLE NOT NULL,
    min_rtt_ms           DOUBLE NOT NULL,
    smoothed_rtt_ms      DOUBLE NOT NULL,
    rttvar_ms            DOUBLE NOT NULL,
    pto_ms               DOUBLE,
    pto_count            INTEGER,
    pto_backoff_ms       DOUBLE,
    handshake_confirmed  BOOLEAN NOT NULL,
    flags                VARCHAR[] NOT NULL,
    logged_event_index   BIGINT,
    logged_latest_rtt_ms DOUBLE,
    logged_min_rtt_ms    DOUBLE,
    logged_smoothed_rtt_ms DOUBLE,
    logged_rttvar_ms     DOUBLE,
    latest_rtt_diff_ms   DOUBLE,
    min_rtt_diff_ms      DOUBLE,
    smoothed_rtt_diff_ms DOUBLE,
    rttvar_diff_ms       DOUBLE
);

-- Address validation (schema version 6, quicack/store/amplification.py): every datagram with its
-- whole UDP payload, and per connection the server's anti-amplification budget, PTOs and 0-RTT.
CREATE TABLE IF NOT EXISTS datagrams (
    connection_id  BIGINT NOT NULL,
    datagram_id    BIGINT NOT NULL,
    time_ms        DOUBLE NOT NULL,
    sender         VARCHAR NOT NULL,
    size_bytes     INTEGER NOT NULL,
    packets        INTEGER NOT NULL,
    packet_types   VARCHAR NOT NULL,
    size_source    VARCHAR NOT NULL
);

CREATE TABLE IF NOT EXISTS address_validation (
    connection_id             BIGINT PRIMARY KEY,
    clock_shift_ms            DOUBLE,
    validated_ms              DOUBLE,
    validated_by              VARCHAR,
    client_bytes_before_validation INTEGER NOT NULL,
    server_bytes_before_validation INTEGER NOT NULL,
    client_datagrams_before_validation INTEGER NOT NULL,
    server_datagrams_before_validation INTEGER NOT NULL,
    amplification_factor      DOUBLE,
    limit_reached             BOOLEAN NOT NULL,
    limit_exceeded            BOOLEAN NOT NULL,
    max_excess_bytes          INTEGER NOT NULL,
    blocked_count             INTEGER NOT NULL,
    first_blocked_ms          DOUBLE,
    first_blocked_sent_bytes  INTEGER,
    first_blocked_received_bytes INTEGER,
    blocked_ms                DOUBLE,
    ended_blocked             BOOLEAN NOT NULL,
    iack_bytes                INTEGER,
    iack_caused_block         BOOLEAN NOT NULL,
    pto_armed_while_blocked   BOOLEAN,
    pto_set_initial           INTEGER,
    pto_set_handshake         INTEGER,
    pto_set_application       INTEGER,
    pto_fired_initial         INTEGER,
    pto_fired_handshake       INTEGER,
    pto_fired_application     INTEGER,
    zero_rtt_sent             INTEGER NOT NULL,
    zero_rtt_received         INTEGER NOT NULL,
    zero_rtt_acked            INTEGER NOT NULL,
    zero_rtt_lost             INTEGER NOT NULL,
    zero_rtt_discarded        INTEGER NOT NULL,
    zero_rtt                  VARCHAR,
    size_sources              VARCHAR[] NOT NULL
);

-- Packets that waited for keys (schema version 6, quicack/store/keywaits.py): one row per buffered packet.
CREATE TABLE IF NOT EXISTS key_waits (
    connection_id          BIGINT NOT NULL,
    buffered_event_index   BIGINT NOT NULL,
    buffered_ms            DOUBLE NOT NULL,
    packet_type            VARCHAR NOT NULL,
    size_bytes             INTEGER,
    processed_event_index  BIGINT,
    processed_ms           DOUBLE,
    packet_number          BIGINT,
    space                  VARCHAR,
    wait_ms                DOUBLE,
    ack_event_index        BIGINT,
    ack_sent_ms            DOUBLE,
    ack_largest            BIGINT,
    ack_delay_ms           DOUBLE,
    ack_delay_from_receipt_ms DOUBLE,
    uncovered_ms           DOUBLE,
    max_ack_delay_ms       DOUBLE NOT NULL,
    sample_inflation_ms    DOUBLE,
    receiver               VARCHAR,
    source                 VARCHAR
);

-- Captures (pcap/pcapng through tshark): what the packets tables cannot say.
CREATE TABLE IF NOT EXISTS capture_files (
    file_id               BIGINT PRIMARY KEY,
    tshark_version        VARCHAR NOT NULL,
    secrets               VARCHAR NOT NULL,
    keylog_path           VARCHAR,
    keylog_sha256         VARCHAR,
    decode_as_ports       INTEGER[] NOT NULL,
    frames                BIGINT NOT NULL,
    quic_datagrams        BIGINT NOT NULL,
    quic_packets          BIGINT NOT NULL,
    packets_not_decrypted BIGINT NOT NULL,
    gso_superframes       BIGINT NOT NULL
);

CREATE TABLE IF NOT EXISTS capture_connections (
    connection_id         BIGINT PRIMARY KEY,
    client_address        VARCHAR,
    client_port           INTEGER,
    server_address        VARCHAR,
    server_port           INTEGER,
    quic_version          VARCHAR,
    tshark_connection     INTEGER,
    datagrams             BIGINT NOT NULL,
    packets_not_decrypted BIGINT NOT NULL,
    gso_superframes       BIGINT NOT NULL
);

CREATE TABLE IF NOT EXISTS capture_issues (
    file_id        BIGINT NOT NULL,
    connection_id  BIGINT,
    frame_number   BIGINT NOT NULL,
    epoch_ms       DOUBLE,
    kind           VARCHAR NOT NULL,
    packet_type    VARCHAR,
    size_bytes     INTEGER,
    detail         VARCHAR
);

-- Scans (schema version 3): one row per run, one per probe (target × repetition).

CREATE TABLE IF NOT EXISTS runs (
    run_id          BIGINT PRIMARY KEY,
    name            VARCHAR NOT NULL,
    shard           VARCHAR NOT NULL,
    cid_run_tag     INTEGER NOT NULL,
    list_path       VARCHAR,
    list_sha256     VARCHAR,
    targets         BIGINT,
    repetitions     INTEGER NOT NULL,
    arguments       JSON NOT NULL,
    host            VARCHAR NOT NULL,
    started_at      TIMESTAMP NOT NULL,
    resumed_at      TIMESTAMP[] NOT NULL,
    finished_at     TIMESTAMP,
    quicack_version VARCHAR NOT NULL,
    aioquic_version VARCHAR NOT NULL,
    tshark_version  VARCHAR,
    python_version  VARCHAR NOT NULL,
    output_dir      VARCHAR NOT NULL,
    pcap_path       VARCHAR,
    -- scan --cluster (schema version 10): the vantage point the run's shard was probed from
    vantage         VARCHAR
);

CREATE TABLE IF NOT EXISTS probes (
    run_id              BIGINT NOT NULL,
    target_index        BIGINT NOT NULL,
    repetition          INTEGER NOT NULL,
    domain              VARCHAR NOT NULL,
    rank                BIGINT,
    address             VARCHAR,
    port                INTEGER,
    schedule            VARCHAR NOT NULL,
    outcome             VARCHAR NOT NULL,
    timeout_phase       VARCHAR,
    error_code          BIGINT,
    error_frame_type    BIGINT,
    error_reason        VARCHAR,
    cid_tag             VARCHAR,
    started_epoch_ms    DOUBLE,
    first_datagram_ms   DOUBLE,
    first_ack_ms        DOUBLE,
    server_hello_ms     DOUBLE,
    handshake_ms        DOUBLE,
    ttfb_ms             DOUBLE,
    response_ms         DOUBLE,
    duration_ms         DOUBLE,
    loop_lag_ms         DOUBLE,
    http_status         INTEGER,
    server_header       VARCHAR,
    alt_svc             VARCHAR,
    response_bytes      BIGINT,
    alpn                VARCHAR,
    tls_cipher          VARCHAR,
    cert_subject        VARCHAR,
    cert_issuer         VARCHAR,
    server_transport_parameters JSON,
    clienthello_bytes   INTEGER,
    clienthello_packets INTEGER,
    split_clienthello   INTEGER NOT NULL,
    datagrams_sent      INTEGER,
    datagrams_received  INTEGER,
    qlog_path           VARCHAR,
    qlog_trace_index    INTEGER,
    qlog_sha256         VARCHAR,
    keylog_path         VARCHAR,
    connection_id       BIGINT,
    worker              INTEGER,
    -- scan --resumption (schema version 6): the resumed connection; address validation of the first
    ticket_received     BOOLEAN,
    ticket_lifetime_s   BIGINT,
    ticket_max_early_data BIGINT,
    token_received      BOOLEAN,
    token_used          BOOLEAN,
    zero_rtt            VARCHAR,
    session_resumed     BOOLEAN,
    resumed_outcome     VARCHAR,
    resumed_cid_tag     VARCHAR,
    resumed_handshake_ms DOUBLE,
    resumed_ttfb_ms     DOUBLE,
    resumed_http_status INTEGER,
    resumed_response_bytes BIGINT,
    amplification_factor DOUBLE,
    server_waited_for_validation BOOLEAN,
    -- the resumed connection's own trace (schema version 9)
    resumed_qlog_path   VARCHAR,
    resumed_qlog_trace_index INTEGER,
    resumed_qlog_sha256 VARCHAR,
    resumed_connection_id BIGINT,
    -- scan --cluster (schema version 10)
    vantage             VARCHAR,
    PRIMARY KEY (run_id, target_index, repetition)
);

-- Testbed relay (quicack testbed relay): one row per relay run, one per datagram it read.

CREATE TABLE IF NOT EXISTS relay_runs (
    relay_run_id     BIGINT PRIMARY KEY,
    listen           VARCHAR NOT NULL,
    upstream         VARCHAR NOT NULL,
    seed             BIGINT NOT NULL,
    config           JSON NOT NULL,
    started_epoch_ms DOUBLE NOT NULL,
    stopped_epoch_ms DOUBLE NOT NULL,
    datagrams        BIGINT NOT NULL,
    kernel_drops     BIGINT NOT NULL,
    cpu_ms           DOUBLE NOT NULL,
    quicack_version  VARCHAR NOT NULL
);

CREATE TABLE IF NOT EXISTS relay_datagrams (
    relay_run_id         BIGINT NOT NULL,
    arrival_index        BIGINT NOT NULL,
    flow                 VARCHAR NOT NULL,
    direction            VARCHAR NOT NULL,
    datagram_index       BIGINT NOT NULL,
    size_bytes           INTEGER NOT NULL,
    quic_types           VARCHAR NOT NULL,
    time_in_epoch_ms     DOUBLE NOT NULL,
    planned_out_epoch_ms DOUBLE,
    time_out_epoch_ms    DOUBLE,
    dropped_reason       VARCHAR,
    PRIMARY KEY (relay_run_id, arrival_index)
);

-- Testbed experiments (quicack testbed run; schema version 5): one row per connection attempt.

CREATE TABLE IF NOT EXISTS testbed_runs (
    experiment                   VARCHAR NOT NULL,
    scenario                     VARCHAR NOT NULL,
    server                       VARCHAR NOT NULL,
    client                       VARCHAR NOT NULL,
    one_way_delay_ms             DOUBLE NOT NULL,
    repetition                   INTEGER NOT NULL,
    drop_to_client               VARCHAR,
    drop_to_server               VARCHAR,
    cert_chain_length            INTEGER NOT NULL,
    cert_delay_ms                DOUBLE NOT NULL,
    response_bytes               BIGINT,
    outcome                      VARCHAR NOT NULL,
    error_reason                 VARCHAR,
    started_epoch_ms             DOUBLE,
    ttfb_ms                      DOUBLE,
    handshake_ms                 DOUBLE,
    client_first_pto_ms          DOUBLE,
    client_pto_count             INTEGER,
    server_pto_count             INTEGER,
    client_retransmitted_packets INTEGER,
    server_retransmitted_packets INTEGER,
    certificates_received        INTEGER,
    response_bytes_received      BIGINT,
    client_connection_id         BIGINT,
    server_connection_id         BIGINT,
    relay_run_id                 BIGINT,
    relay_flow                   VARCHAR,
    client_qlog_path             VARCHAR,
    server_qlog_path             VARCHAR,
    ttlb_ms                      DOUBLE,
    prime_bytes                  BIGINT,
    prime_rate_to_client_kbps    DOUBLE,
    receive_window_bytes         BIGINT,
    resumption                   BOOLEAN,
    zero_rtt                     VARCHAR,
    session_resumed              BOOLEAN,
    full_ttfb_ms                 DOUBLE,
    full_handshake_ms            DOUBLE,
    full_client_connection_id    BIGINT,
    capture_connection_id        BIGINT,
    PRIMARY KEY (experiment, scenario, server, client, one_way_delay_ms, repetition)
);

-- ACK-policy experiments (issue 28; schema version 6): one row per attempt of quicack's client in a
-- testbed scenario that names an ack_policy (quicack/lab/ackpolicyruns.py).

CREATE TABLE IF NOT EXISTS ack_policy_runs (
    experiment            VARCHAR NOT NULL,
    scenario              VARCHAR NOT NULL,
    server                VARCHAR NOT NULL,
    client                VARCHAR NOT NULL,
    one_way_delay_ms      DOUBLE NOT NULL,
    repetition            INTEGER NOT NULL,
    ack_policy            VARCHAR NOT NULL,
    path                  VARCHAR NOT NULL,
    return_kbps           DOUBLE,
    forward_loss_pct      DOUBLE NOT NULL,
    forward_bytes         BIGINT,
    return_bytes          BIGINT,
    return_ack_only_bytes BIGINT,
    return_packets        BIGINT,
    download_s            DOUBLE,
    forward_mbps          DOUBLE,
    relay_run_id          BIGINT,
    relay_flow            VARCHAR,
    PRIMARY KEY (experiment, scenario, server, client, one_way_delay_ms, repetition)
);
