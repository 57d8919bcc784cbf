//! The RFC 9002 replay's Python face: `RttEstimator`, and `Replayer`, which takes every stored
//! connection's sent packets, ACKs, logged metrics and received packets as Arrow columns, replays
//! each connection (`recovery`) and sets each sample beside what the implementation logged.

use pyo3::prelude::*;
use pyo3::types::PyList;
use rustc_hash::FxHashMap;

use crate::columns::{bools, f64s, i32s, i64s, text_lists, texts, Table};
use crate::input;
use crate::output;
use crate::recovery::{self, Event, SentLog};

/// The RTT fields a metrics event logs: latest, min, smoothed, rttvar.
type Rtt = [Option<f64>; 4];
/// One space's sent packets: numbers, times, ack-eliciting, trace positions.
type SentSpace = (Vec<i64>, Vec<f64>, Vec<bool>, Vec<i64>);
/// While a connection's metrics are added: whether it logs metrics before their packet, the last
/// logged value of each field so far, its next received packet (index), the row kept for the
/// packet before that.
type Filling = (bool, Rtt, usize, Option<(i64, Rtt)>);

fn space_code(space: &str) -> PyResult<u8> {
    match space {
        "initial" => Ok(recovery::INITIAL),
        "handshake" => Ok(recovery::HANDSHAKE),
        "application_data" => Ok(recovery::APPLICATION),
        other => Err(pyo3::exceptions::PyValueError::new_err(format!("not a packet number space: {other:?}"))),
    }
}

/// RFC 9002 §5: min_rtt, smoothed_rtt and rttvar of one path (see `recovery`).
#[pyclass(module = "quicack._native")]
pub struct RttEstimator {
    inner: recovery::Estimator,
}

#[pymethods]
impl RttEstimator {
    #[new]
    fn new() -> Self {
        RttEstimator { inner: recovery::Estimator::default() }
    }

    #[getter]
    fn latest_rtt_ms(&self) -> f64 {
        self.inner.latest_rtt_ms
    }
    #[getter]
    fn min_rtt_ms(&self) -> f64 {
        self.inner.min_rtt_ms
    }
    #[getter]
    fn smoothed_rtt_ms(&self) -> f64 {
        self.inner.smoothed_rtt_ms
    }
    #[getter]
    fn rttvar_ms(&self) -> f64 {
        self.inner.rttvar_ms
    }
    #[getter]
    fn has_sample(&self) -> bool {
        self.inner.has_sample
    }

    /// Take one RTT sample; return (the ack_delay §5.3 allows, adjusted_rtt).
    #[pyo3(signature = (latest_rtt_ms, ack_delay_ms, *, space, handshake_confirmed, max_ack_delay_ms))]
    fn update(&mut self, latest_rtt_ms: f64, ack_delay_ms: f64, space: &str, handshake_confirmed: bool,
              max_ack_delay_ms: f64) -> PyResult<(f64, f64)> {
        Ok(self.inner.update(latest_rtt_ms, ack_delay_ms, space_code(space)?, handshake_confirmed, max_ack_delay_ms))
    }

    /// The PTO period of `space` without backoff; None where it is not armed.
    #[pyo3(signature = (space, *, handshake_confirmed, max_ack_delay_ms))]
    fn pto_ms(&self, space: &str, handshake_confirmed: bool, max_ack_delay_ms: f64) -> PyResult<Option<f64>> {
        Ok(self.inner.pto_ms(space_code(space)?, handshake_confirmed, max_ack_delay_ms))
    }
}

/// A batch of sent packets: (connection_id, space, packet_number, time_ms, ack_eliciting,
/// event_index) columns.
type SentColumns = (input::Primitive, input::Primitive, input::Primitive, input::Primitive, input::Primitive,
                    input::Primitive);
/// A batch of other replay events: (connection_id, event_index, kind, time_ms, space,
/// packet_number, flat ranges [low, high, …], value) columns.
type EventColumns = (input::Primitive, input::Primitive, input::Primitive, input::Primitive, input::Primitive,
                     input::Primitive, input::List, input::Primitive);
/// A batch of logged RTT metrics: (connection_id, event_index, latest_rtt_ms, min_rtt_ms,
/// smoothed_rtt_ms, rtt_variance_ms) columns, rows with at least one of the four.
type MetricColumns = (input::Primitive, input::Primitive, input::Primitive, input::Primitive, input::Primitive,
                      input::Primitive);
/// A batch of received packets: (connection_id, event_index) columns.
type ReceivedColumns = (input::Primitive, input::Primitive);
/// Per replayed connection: (connection_id, samples, ACKs without a sample, ACKs of packets not
/// in the trace, lowest min_rtt, row of its first sample in the samples table).
type ReplayStats = (i64, i64, i64, i64, Option<f64>, Option<usize>);

/// One stored replay event (see `Replayer::add_events`).
struct Ev {
    at: i64,
    kind: i64,
    time_ms: f64,
    space: u8,
    packet_number: Option<i64>,
    value: Option<f64>,
    /// its ACK ranges: `ranges[start..end]`
    ranges: (usize, usize),
}

/// The RFC 9002 replay of many connections at once (see `recovery`): their sent packets and
/// other events handed in a batch at a time (held as the replay needs them, not as the batches
/// came), then `run`.
///
/// Sent packets come in any order (each space's are sorted by packet number and position when
/// they are not); events sorted by connection, position and kind — kinds 1 ACK, 2 lost, 3 PTO
/// expired, 4 space discarded, 5 handshake confirmed, 6 peer max_ack_delay (value), 7 Retry;
/// spaces 0 initial, 1 handshake, 2 application.
#[pyclass(module = "quicack._native")]
#[derive(Default)]
pub struct Replayer {
    /// the connections to replay: (connection_id, is_client, pto_observable, metrics_before_packet)
    views: Vec<(i64, bool, bool, bool)>,
    sent: FxHashMap<i64, [SentSpace; 3]>,
    events: FxHashMap<i64, Vec<Ev>>,
    ranges: Vec<(i64, i64)>,
    /// per connection: the logged RTT metrics rows (event_index, latest, min, smoothed, rttvar)
    /// that can be set beside a sample (see `add_metrics`), in trace order, each field carrying
    /// its last logged value
    metrics: FxHashMap<i64, Vec<(i64, Rtt)>>,
    /// per connection, while metrics are added (see `Filling`)
    filling: FxHashMap<i64, Filling>,
    /// per connection: the trace positions of the packets it received, in order
    received: FxHashMap<i64, Vec<i64>>,
}

#[pymethods]
impl Replayer {
    /// The connections to replay: (connection_id, is_client, pto_observable,
    /// metrics_before_packet), ascending ids.
    #[new]
    fn new(views: Vec<(i64, bool, bool, bool)>) -> Self {
        Replayer { views, ..Replayer::default() }
    }

    fn add_sent(&mut self, py: Python<'_>, batch: SentColumns) {
        py.detach(|| {
            let (cid, space, pn, time, eliciting, at) = &batch;
            for i in 0..cid.len() {
                let logs = self.sent.entry(cid.i64(i).unwrap_or(0)).or_default();
                let c = &mut logs[space.i64(i).unwrap_or(2).clamp(0, 2) as usize];
                c.0.push(pn.i64(i).unwrap_or(0));
                c.1.push(time.f64(i).unwrap_or(f64::NAN));
                c.2.push(eliciting.bool(i).unwrap_or(true));
                c.3.push(at.i64(i).unwrap_or(0));
            }
        })
    }

    fn add_events(&mut self, py: Python<'_>, batch: EventColumns) {
        py.detach(|| {
            let (cid, at, kind, time, space, pn, ranges, value) = &batch;
            for r in 0..cid.len() {
                let begin = self.ranges.len();
                let k = kind.i64(r).unwrap_or(0);
                if k == 1 {
                    // ACK ranges as pairs; producers that log only the largest acknowledged
                    // (pcap2qlog 0.1) get that one packet as their only range
                    let flat: Vec<Option<i64>> = ranges.get(r).map(|v| v.collect()).unwrap_or_default();
                    for pair in flat.chunks(2) {
                        if let Some(low) = pair[0] {
                            self.ranges.push((low, pair.get(1).copied().flatten().unwrap_or(low)));
                        }
                    }
                    if self.ranges.len() == begin {
                        if let Some(largest) = pn.i64(r) {
                            self.ranges.push((largest, largest));
                        }
                    }
                }
                self.events.entry(cid.i64(r).unwrap_or(0)).or_default().push(Ev {
                    at: at.i64(r).unwrap_or(-1),
                    kind: k,
                    time_ms: time.f64(r).unwrap_or(f64::NAN),
                    space: space.i64(r).unwrap_or(2).clamp(0, 2) as u8,
                    packet_number: pn.i64(r),
                    value: value.f64(r),
                    ranges: (begin, self.ranges.len()),
                });
            }
        })
    }

    /// Logged RTT metrics, sorted by connection and position (after every received packet was
    /// added).  Producers that log only the fields that changed (quic-go, quinn): a missing field
    /// keeps its last logged value.  Only the rows `logged_after` can pick are kept — the first
    /// after each received packet, or (metrics logged before their packet) the last before
    /// each — so a long connection's metrics are not all held.
    fn add_metrics(&mut self, py: Python<'_>, batch: MetricColumns) {
        py.detach(|| {
            let (cid, at, latest, min, smoothed, var) = &batch;
            for r in 0..cid.len() {
                let c = cid.i64(r).unwrap_or(0);
                let position = at.i64(r).unwrap_or(0);
                let received = self.received.get(&c).map_or(&[][..], |v| &v[..]);
                let kept = self.metrics.entry(c).or_default();
                let views = &self.views;
                let (before, filled, next, pending) = self.filling.entry(c).or_insert_with(|| {
                    (views.iter().any(|v| v.0 == c && v.3), [None; 4], 0, None)
                });
                let before = *before;
                for (k, column) in [latest, min, smoothed, var].into_iter().enumerate() {
                    if let Some(v) = column.f64(r) {
                        filled[k] = Some(v);
                    }
                }
                // (a row that logs neither latest_rtt nor smoothed_rtt is no answer to an ACK)
                if !(latest.valid(r) || smoothed.valid(r)) {
                    continue;
                }
                let row = (position, *filled);
                if before {
                    // the last row before each received packet
                    while *next < received.len() && received[*next] < position {
                        kept.extend(pending.take());
                        *next += 1;
                    }
                    *pending = Some(row);
                } else {
                    // the first row after each received packet (and before any)
                    let passed = received.partition_point(|&p| p < position);
                    if kept.is_empty() || passed > *next {
                        kept.push(row);
                        *next = passed;
                    }
                }
            }
        })
    }

    /// The packets each connection's endpoint received, sorted by connection and position (before
    /// the metrics).
    fn add_received(&mut self, py: Python<'_>, batch: ReceivedColumns) {
        py.detach(|| {
            let (cid, at) = &batch;
            for r in 0..cid.len() {
                self.received.entry(cid.i64(r).unwrap_or(0)).or_default().push(at.i64(r).unwrap_or(0));
            }
        })
    }

    /// Replay every view.  `confirmation_discards_handshake`: RFC 9001 §4.9.2, "An endpoint MUST
    /// discard its Handshake keys when the TLS handshake is confirmed".  Returns the samples (the
    /// columns of `rtt_samples`, each sample next to what the implementation logged after the same
    /// ACK: see `logged_after`) and a `ReplayStats` per view.  What was added is let go.
    fn run<'py>(&mut self, py: Python<'py>, confirmation_discards_handshake: bool)
                -> PyResult<(Bound<'py, PyList>, Vec<ReplayStats>)> {
        let views = std::mem::take(&mut self.views);
        let (table, stats) = py.detach(|| self.replay_all(&views, confirmation_discards_handshake));
        Ok((output::table(py, &table)?, stats))
    }
}

/// The columns of `rtt_samples` the replay fills (the flags and the logged metrics follow).
fn sample_table() -> Table {
    Table::new(vec![
        i64s("connection_id"), i64s("event_index"), f64s("time_ms"), texts("packet_number_space"),
        i64s("largest_acknowledged"), f64s("latest_rtt_ms"), f64s("ack_delay_ms"), f64s("ack_delay_used_ms"),
        f64s("adjusted_rtt_ms"), f64s("min_rtt_ms"), f64s("smoothed_rtt_ms"), f64s("rttvar_ms"), f64s("pto_ms"),
        i32s("pto_count"), f64s("pto_backoff_ms"), bools("handshake_confirmed"),
    ])
}

/// The columns of `rtt_samples` that set what the implementation logged beside each sample.
fn logged_table() -> Table {
    Table::new(vec![
        i64s("logged_event_index"), f64s("logged_latest_rtt_ms"), f64s("logged_min_rtt_ms"),
        f64s("logged_smoothed_rtt_ms"), f64s("logged_rttvar_ms"), f64s("latest_rtt_diff_ms"),
        f64s("min_rtt_diff_ms"), f64s("smoothed_rtt_diff_ms"), f64s("rttvar_diff_ms"),
    ])
}

/// One connection's stored events as the replay takes them (`ranges`: every ACK's, see `Ev`);
/// `discards`: handshake confirmation discards the Handshake space too.
fn replay_events<'r>(stored: &[Ev], ranges: &'r [(i64, i64)], discards: bool) -> Vec<Event<'r>> {
    let mut evs: Vec<Event> = Vec::with_capacity(stored.len());
    for e in stored {
        match e.kind {
            1 => evs.push(Event::Ack { time_ms: e.time_ms, space: e.space, ranges: &ranges[e.ranges.0..e.ranges.1],
                                       ack_delay_ms: e.value, at: e.at }),
            2 => evs.push(Event::Lost { space: e.space, packet_number: e.packet_number.unwrap_or(0), at: e.at }),
            3 => evs.push(Event::PtoExpired),
            4 => evs.push(Event::SpaceDiscarded { space: e.space, at: e.at }),
            5 => {
                evs.push(Event::HandshakeConfirmed);
                if discards {
                    evs.push(Event::SpaceDiscarded { space: recovery::HANDSHAKE, at: e.at });
                }
            }
            6 => evs.push(Event::PeerMaxAckDelay { max_ack_delay_ms: e.value.unwrap_or(f64::NAN) }),
            7 => evs.push(Event::RetryReceived { at: e.at }),
            _ => {}
        }
    }
    evs
}

impl Replayer {
    fn replay_all(&mut self, views: &[(i64, bool, bool, bool)], discards: bool) -> (Table, Vec<ReplayStats>) {
        let mut table = sample_table();
        let mut flags: Vec<u8> = Vec::new(); // per sample row: its flag bits (the column is built last)
        let mut stats = Vec::with_capacity(views.len());
        let ranges = std::mem::take(&mut self.ranges);
        let mut logged = logged_table();
        for &(cid, is_client, pto_observable, metrics_before_packet) in views {
            let mut metrics = self.metrics.remove(&cid).unwrap_or_default();
            if let Some((_, _, _, pending)) = self.filling.remove(&cid) {
                metrics.extend(pending); // (the last row before packets not yet passed)
            }
            let received = self.received.remove(&cid).unwrap_or_default();
            let mut logs: [SentLog; 3] = self.sent.remove(&cid).unwrap_or_default()
                .map(|(n, t, e, a)| SentLog::new(n, t, e, a).sorted());
            let stored = self.events.remove(&cid).unwrap_or_default();
            let evs = replay_events(&stored, &ranges, discards);
            let first_row = table.rows();
            let mut emit = |s: &recovery::Sample| {
                let c = &mut table.columns;
                c[0].i64(Some(cid));
                c[1].i64(Some(s.event_index));
                c[2].f64(Some(s.time_ms));
                c[3].text(Some(recovery::SPACES[s.space as usize]));
                c[4].i64(Some(s.largest_acknowledged));
                c[5].f64(Some(s.latest_rtt_ms));
                c[6].f64(s.ack_delay_ms);
                c[7].f64(Some(s.ack_delay_used_ms));
                c[8].f64(Some(s.adjusted_rtt_ms));
                c[9].f64(Some(s.min_rtt_ms));
                c[10].f64(Some(s.smoothed_rtt_ms));
                c[11].f64(Some(s.rttvar_ms));
                c[12].f64(s.pto_ms);
                c[13].i32(s.pto_count);
                c[14].f64(s.pto_backoff_ms());
                c[15].bool(Some(s.handshake_confirmed));
                flags.push(s.flags);
                let found = logged_after(&metrics, &received, s.event_index, metrics_before_packet);
                let c = &mut logged.columns;
                c[0].i64(found.map(|(at, _)| at));
                let values = found.map_or([None; 4], |(_, v)| v);
                for (k, v) in values.iter().enumerate() {
                    c[1 + k].f64(*v);
                }
                let replayed = [s.latest_rtt_ms, s.min_rtt_ms, s.smoothed_rtt_ms, s.rttvar_ms];
                for k in 0..4 {
                    c[5 + k].f64(values[k].map(|v| replayed[k] - v));
                }
            };
            let result = recovery::replay(evs, is_client, pto_observable, &mut logs, &mut emit);
            if result.first_sample_inflated {
                flags[first_row] |= recovery::FLAG_FIRST_SAMPLE_INFLATED;
            }
            stats.push((cid, result.sample_count, result.acks_without_sample, result.acks_of_unknown_packets,
                        result.lowest_min_rtt_ms, (result.sample_count > 0).then_some(first_row)));
        }
        let mut column = text_lists("flags");
        for bits in flags {
            column.texts(recovery::FLAG_NAMES.iter().filter(|(bit, _)| bits & bit != 0).map(|(_, name)| *name));
        }
        table.columns.push(column);
        table.columns.extend(logged.columns);
        self.sent.clear();
        self.events.clear();
        self.metrics.clear();
        self.filling.clear();
        self.received.clear();
        (table, stats)
    }
}

/// The metrics the implementation logged right after the ACK of the sample at trace position
/// `at`: the first metrics row after the ACK's packet, if it comes before the next packet the
/// endpoint received (otherwise it belongs to something else).  Producers that log a
/// packet_received event only after handling its frames (quic-go, quirk
/// metrics_before_packet_received) log those metrics *before* the packet: there, the last
/// metrics row after the previous received packet.  (position, [latest, min, smoothed, rttvar]).
fn logged_after(metrics: &[(i64, Rtt)], received: &[i64], at: i64, before: bool) -> Option<(i64, Rtt)> {
    let i = received.partition_point(|&r| r < at);
    let (prev, next) = if received.get(i) == Some(&at) {
        (if i > 0 { received[i - 1] } else { -1 }, received.get(i + 1).copied().unwrap_or(i64::MAX))
    } else {
        (-1, i64::MAX) // (not a received packet's: any row after, or before, will do)
    };
    let j = metrics.partition_point(|&(m, _)| m <= at); // the first row after the ACK's packet
    if before {
        let k = metrics[..j].partition_point(|&(m, _)| m < at);
        (k > 0 && metrics[k - 1].0 > prev).then(|| metrics[k - 1])
    } else {
        metrics.get(j).filter(|&&(m, _)| m < next).copied()
    }
}

