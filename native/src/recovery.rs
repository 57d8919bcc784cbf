//! RFC 9002 replay: one endpoint's RTT estimate and PTO, from its own packets and the ACKs it got.
//!
//! Theory of operation: `replay` walks one endpoint's events in trace order — ACK frames it
//! received, packets it declared lost, PTO expiries the trace shows, packet number spaces it
//! discarded, a Retry, handshake confirmation and the peer's `max_ack_delay` — against the
//! packets it sent (`SentLog`, one per packet number space, sorted by packet number), and
//! re-computes what RFC 9002 §5 and §6.2 (with erratum 7539: rttvar is updated before
//! smoothed_rtt) say the endpoint should have estimated.  Each RTT sample becomes a `Sample`.
//! Pure: no clock, no I/O; times are the trace's, in ms.  (`quicack.core.recovery` is its Python
//! face: the event types, and the same replay for a list of events.)
//!
//! One `Estimator` per connection (min_rtt, smoothed_rtt and rttvar belong to the path, not to a
//! packet number space); the PTO is computed per packet number space (§6.2.1).

pub const INITIAL: u8 = 0;
pub const HANDSHAKE: u8 = 1;
pub const APPLICATION: u8 = 2;
pub const SPACES: [&str; 3] = ["initial", "handshake", "application_data"];

/// §6.1.2: "The RECOMMENDED value of the timer granularity (kGranularity) is 1 millisecond."
pub const K_GRANULARITY_MS: f64 = 1.0;
/// §6.2.2: "When no previous RTT is available, the initial RTT SHOULD be set to 333 milliseconds."
pub const K_INITIAL_RTT_MS: f64 = 333.0;
/// RFC 9000 §18.2 max_ack_delay: "If this value is absent, a default of 25 milliseconds is assumed."
pub const DEFAULT_MAX_ACK_DELAY_MS: f64 = 25.0;
/// A first sample this many times the connection's final min_rtt (and > 1 ms above it) is flagged.
pub const INFLATED_FIRST_SAMPLE_RATIO: f64 = 1.5;

/// Sample flags (`rtt_samples.flags`), in the order they are listed.
pub const FLAG_ACK_DELAY_EXCEEDS_SAMPLE: u8 = 1;
pub const FLAG_ACK_DELAY_NOT_SUBTRACTED: u8 = 2;
pub const FLAG_FIRST_SAMPLE_INFLATED: u8 = 4;
pub const FLAG_NAMES: [(u8, &str); 3] = [
    (FLAG_ACK_DELAY_EXCEEDS_SAMPLE, "ack_delay_exceeds_sample"),
    (FLAG_ACK_DELAY_NOT_SUBTRACTED, "ack_delay_not_subtracted"),
    (FLAG_FIRST_SAMPLE_INFLATED, "first_sample_inflated"),
];

/// RFC 9002 §5: min_rtt, smoothed_rtt and rttvar of one path.
#[derive(Clone, Debug)]
pub struct Estimator {
    pub latest_rtt_ms: f64,
    pub min_rtt_ms: f64,
    pub smoothed_rtt_ms: f64,
    pub rttvar_ms: f64,
    pub has_sample: bool,
}

impl Default for Estimator {
    fn default() -> Self {
        // §5.3: "smoothed_rtt = kInitialRtt; rttvar = kInitialRtt / 2"
        Estimator {
            latest_rtt_ms: 0.0,
            min_rtt_ms: 0.0,
            smoothed_rtt_ms: K_INITIAL_RTT_MS,
            rttvar_ms: K_INITIAL_RTT_MS / 2.0,
            has_sample: false,
        }
    }
}

impl Estimator {
    /// Take one RTT sample; return (the ack_delay §5.3 allows, adjusted_rtt).  The delay was
    /// subtracted when adjusted_rtt differs from latest_rtt.
    pub fn update(&mut self, latest_rtt_ms: f64, ack_delay_ms: f64, space: u8, handshake_confirmed: bool,
                  max_ack_delay_ms: f64) -> (f64, f64) {
        self.latest_rtt_ms = latest_rtt_ms;
        if !self.has_sample {
            // §5.2: "min_rtt MUST be set to the latest_rtt on the first RTT sample."
            // §5.3: "On the first RTT sample after initialization, smoothed_rtt and rttvar are
            // set as follows: smoothed_rtt = latest_rtt; rttvar = latest_rtt / 2"
            self.has_sample = true;
            self.min_rtt_ms = latest_rtt_ms;
            self.smoothed_rtt_ms = latest_rtt_ms;
            self.rttvar_ms = latest_rtt_ms / 2.0;
            return (0.0, latest_rtt_ms);
        }
        // §5.2: "min_rtt MUST be set to the lesser of min_rtt and latest_rtt on all other
        // samples." ... "does not adjust for acknowledgment delays reported by the peer"
        self.min_rtt_ms = self.min_rtt_ms.min(latest_rtt_ms);
        let mut ack_delay = ack_delay_ms;
        if space == INITIAL {
            // §5.3: "MAY ignore the acknowledgment delay for Initial packets, since these
            // acknowledgments are not delayed by the peer"
            ack_delay = 0.0;
        } else if handshake_confirmed {
            // §5.3: "MUST use the lesser of the acknowledgment delay and the peer's max_ack_delay
            // after the handshake is confirmed" (and "SHOULD ignore the peer's max_ack_delay
            // until the handshake is confirmed")
            ack_delay = ack_delay.min(max_ack_delay_ms);
        }
        // §5.3: "MUST NOT subtract the acknowledgment delay from the RTT sample if the
        // resulting value is smaller than the min_rtt."
        let mut adjusted = latest_rtt_ms;
        if latest_rtt_ms >= self.min_rtt_ms + ack_delay {
            adjusted = latest_rtt_ms - ack_delay;
        }
        // §5.3 with erratum 7539 (as Appendix A.7): rttvar first, from the previous smoothed_rtt
        // "rttvar = 3/4 * rttvar + 1/4 * abs(smoothed_rtt - adjusted_rtt)
        //  smoothed_rtt = 7/8 * smoothed_rtt + 1/8 * adjusted_rtt"
        self.rttvar_ms = 0.75 * self.rttvar_ms + 0.25 * (self.smoothed_rtt_ms - adjusted).abs();
        self.smoothed_rtt_ms = 0.875 * self.smoothed_rtt_ms + 0.125 * adjusted;
        (ack_delay, adjusted)
    }

    /// The PTO period of `space` without backoff; None where it is not armed.
    pub fn pto_ms(&self, space: u8, handshake_confirmed: bool, max_ack_delay_ms: f64) -> Option<f64> {
        if space == APPLICATION && !handshake_confirmed {
            // §6.2.1: "An endpoint MUST NOT set its PTO timer for the Application Data packet
            // number space until the handshake is confirmed."
            return None;
        }
        // §6.2.1: "PTO = smoothed_rtt + max(4*rttvar, kGranularity) + max_ack_delay" ... "When
        // the PTO is armed for Initial or Handshake packet number spaces, the max_ack_delay in
        // the PTO period computation is set to 0"
        let mut pto = self.smoothed_rtt_ms + (4.0 * self.rttvar_ms).max(K_GRANULARITY_MS);
        if space == APPLICATION {
            pto += max_ack_delay_ms;
        }
        // "The PTO period MUST be at least kGranularity to avoid the timer expiring immediately."
        Some(pto.max(K_GRANULARITY_MS))
    }
}

/// The packets one endpoint sent in one packet number space, sorted by packet number.
///
/// Acknowledged/removed packets are skipped with a "next still in flight" pointer per position
/// (union–find with path compression), so an ACK whose ranges repeat already acknowledged
/// packets costs nothing for them.
#[derive(Default, Debug)]
pub struct SentLog {
    pub numbers: Vec<i64>,
    pub times: Vec<f64>,
    pub eliciting: Vec<bool>,
    /// where each packet sits in the trace
    pub sent_at: Vec<i64>,
    next: Vec<usize>,
}

impl SentLog {
    /// Columns of equal length, sorted by packet number (then trace position).
    pub fn new(numbers: Vec<i64>, times: Vec<f64>, eliciting: Vec<bool>, sent_at: Vec<i64>) -> Self {
        let next = (0..=numbers.len()).collect();
        SentLog { numbers, times, eliciting, sent_at, next }
    }

    /// Sort the columns by (packet number, trace position) if they are not.
    pub fn sorted(self) -> Self {
        let n = self.numbers.len();
        if (1..n).all(|i| (self.numbers[i - 1], self.sent_at[i - 1]) <= (self.numbers[i], self.sent_at[i])) {
            return self;
        }
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by_key(|&i| (self.numbers[i], self.sent_at[i]));
        SentLog::new(order.iter().map(|&i| self.numbers[i]).collect(), order.iter().map(|&i| self.times[i]).collect(),
                     order.iter().map(|&i| self.eliciting[i]).collect(), order.iter().map(|&i| self.sent_at[i]).collect())
    }

    /// The first position ≥ i still in flight (len if none).
    fn alive(&mut self, i: usize) -> usize {
        let mut root = i;
        while self.next[root] != root {
            root = self.next[root];
        }
        let mut i = i;
        while self.next[i] != root {
            let up = self.next[i];
            self.next[i] = root;
            i = up;
        }
        root
    }

    /// The first position whose number is > `pn`.
    fn after(&self, pn: i64) -> usize {
        self.numbers.partition_point(|&x| x <= pn)
    }

    /// (was `pn` ever sent, its latest send still in flight before `before` or None).
    pub fn lookup(&self, pn: i64, before: i64) -> (bool, Option<usize>) {
        let i = self.after(pn);
        if i == 0 || self.numbers[i - 1] != pn {
            return (false, None);
        }
        (true, self.in_flight(i - 1, pn, before))
    }

    /// The last position ≤ `i` of packet `pn` still in flight and sent before `before`.  (A
    /// number is logged twice only when a trace reuses it, as aioquic does after a Retry; the
    /// earlier send is gone by then.)
    fn in_flight(&self, i: usize, pn: i64, before: i64) -> Option<usize> {
        let mut i = i as isize;
        while i >= 0 && self.numbers[i as usize] == pn {
            let u = i as usize;
            if self.next[u] == u && self.sent_at[u] < before {
                return Some(u);
            }
            i -= 1;
        }
        None
    }

    /// Remove the packets in flight with numbers in the ACK's inclusive `ranges` that were sent
    /// before trace position `before`: (any packet newly acknowledged, any of them ack-eliciting).
    pub fn take_ranges(&mut self, ranges: &[(i64, i64)], before: i64) -> (bool, bool) {
        let (mut newly_any, mut newly_eliciting) = (false, false);
        for &(low, high) in ranges {
            let mut i = self.numbers.partition_point(|&x| x < low);
            if self.next[i] != i {
                i = self.alive(i);
            }
            let end = self.after(high);
            while i < end {
                if self.sent_at[i] < before {
                    self.next[i] = i + 1;
                    newly_any = true;
                    if self.eliciting[i] {
                        newly_eliciting = true;
                    }
                }
                let j = i + 1;
                i = if self.next[j] == j { j } else { self.alive(j) };
            }
        }
        (newly_any, newly_eliciting)
    }

    pub fn remove(&mut self, pn: i64, before: i64) {
        let i = self.after(pn);
        if i > 0 && self.numbers[i - 1] == pn {
            if let Some(at) = self.in_flight(i - 1, pn, before) {
                self.next[at] = at + 1;
            }
        }
    }

    pub fn clear_sent_before(&mut self, before: i64) {
        let mut i = self.alive(0);
        while i < self.numbers.len() {
            if self.sent_at[i] < before {
                self.next[i] = i + 1;
            }
            i = self.alive(i + 1);
        }
    }
}

/// One replay event; `at` is where it sits in the trace.
#[derive(Clone, Copy, Debug)]
pub enum Event<'a> {
    Ack { time_ms: f64, space: u8, ranges: &'a [(i64, i64)], ack_delay_ms: Option<f64>, at: i64 },
    Lost { space: u8, packet_number: i64, at: i64 },
    PtoExpired,
    SpaceDiscarded { space: u8, at: i64 },
    RetryReceived { at: i64 },
    HandshakeConfirmed,
    PeerMaxAckDelay { max_ack_delay_ms: f64 },
}

#[derive(Clone, Debug)]
pub struct Sample {
    pub event_index: i64,
    pub time_ms: f64,
    pub space: u8,
    pub largest_acknowledged: i64,
    pub latest_rtt_ms: f64,
    /// as decoded from the ACK frame (None: the trace does not say; taken as 0)
    pub ack_delay_ms: Option<f64>,
    /// what §5.3 lets the estimator use (0 for Initial, capped after confirmation)
    pub ack_delay_used_ms: f64,
    pub adjusted_rtt_ms: f64,
    pub min_rtt_ms: f64,
    pub smoothed_rtt_ms: f64,
    pub rttvar_ms: f64,
    /// PTO period of this sample's space right after the sample (None: not armed)
    pub pto_ms: Option<f64>,
    /// PTO backoff exponent; None when the trace does not show PTO expiries
    pub pto_count: Option<i32>,
    pub handshake_confirmed: bool,
    pub flags: u8,
}

impl Sample {
    /// The PTO period with its backoff, pto_ms · 2^pto_count (None when either is unknown): §6.2.1
    /// "When a PTO timer expires, the PTO backoff MUST be increased, resulting in the PTO period
    /// being set to twice its current value."
    pub fn pto_backoff_ms(&self) -> Option<f64> {
        match (self.pto_ms, self.pto_count) {
            (Some(pto), Some(n)) => Some(pto * 2f64.powi(n)),
            _ => None,
        }
    }
}

#[derive(Default, Debug)]
pub struct Replay {
    /// samples taken (each handed to the caller as it is taken)
    pub sample_count: i64,
    /// ACK frames that acknowledged nothing new, or whose largest was not newly acknowledged, or
    /// that newly acknowledged only non-ack-eliciting packets (§5.1: no sample)
    pub acks_without_sample: i64,
    /// ACKs naming packets this endpoint never sent in the trace (trace starts late, or is cut)
    pub acks_of_unknown_packets: i64,
    /// the smallest min_rtt of any sample
    pub lowest_min_rtt_ms: Option<f64>,
    /// the first sample is this many times the connection's final min_rtt and more than
    /// kGranularity above it: `FLAG_FIRST_SAMPLE_INFLATED`, known only at the end
    pub first_sample_inflated: bool,
}

/// Replay RFC 9002 §5–§6.2 over one endpoint's events (in trace order), against the packets it
/// sent (`sent`, one log per packet number space); each sample is handed to `emit` as it is taken.
pub fn replay<'a>(events: impl IntoIterator<Item = Event<'a>>, is_client: bool, pto_observable: bool,
                  sent: &mut [SentLog; 3], emit: &mut dyn FnMut(&Sample)) -> Replay {
    let mut est = Estimator::default();
    let mut confirmed = false;
    // Appendix A.8: "Assume clients validate the server's address implicitly."
    let mut address_validated = !is_client;
    let mut max_ack_delay = DEFAULT_MAX_ACK_DELAY_MS;
    let mut pto_count: i32 = 0;
    let mut result = Replay::default();
    let mut first_latest: Option<f64> = None;
    for ev in events {
        match ev {
            Event::Ack { time_ms, space, ranges, ack_delay_ms, at } => {
                let sample = on_ack(time_ms, space, ranges, ack_delay_ms, at, &mut est, &mut sent[space as usize],
                                    &mut result, confirmed, max_ack_delay);
                if space == HANDSHAKE && is_client {
                    // Appendix A.8 PeerCompletedAddressValidation: "has received Handshake ACK"
                    address_validated = true;
                }
                // §6.2.1: "The PTO backoff factor is reset when an acknowledgment is received,
                // except ... a client does not reset the PTO backoff factor on receiving
                // acknowledgments in Initial packets." (Appendix A.7: only if
                // PeerCompletedAddressValidation())
                if address_validated || confirmed {
                    pto_count = 0;
                }
                if let Some(mut s) = sample {
                    s.min_rtt_ms = est.min_rtt_ms;
                    s.smoothed_rtt_ms = est.smoothed_rtt_ms;
                    s.rttvar_ms = est.rttvar_ms;
                    s.pto_ms = est.pto_ms(space, confirmed, max_ack_delay);
                    s.pto_count = if pto_observable { Some(pto_count) } else { None };
                    s.handshake_confirmed = confirmed;
                    first_latest.get_or_insert(s.latest_rtt_ms);
                    result.sample_count += 1;
                    emit(&s);
                }
            }
            Event::Lost { space, packet_number, at } => {
                // A packet the endpoint declared lost is no longer in sent_packets (Appendix
                // A.10 DetectAndRemoveLostPackets), so a late ACK of it cannot yield a sample.
                sent[space as usize].remove(packet_number, at);
            }
            Event::PtoExpired => {
                // §6.2.1: "When a PTO timer expires, the PTO backoff MUST be increased"
                pto_count += 1;
            }
            Event::SpaceDiscarded { space, at } => {
                // Appendix A.11 OnPacketNumberSpaceDiscarded: "sent_packets[pn_space].clear() ...
                // pto_count = 0"
                sent[space as usize].clear_sent_before(at);
                pto_count = 0;
            }
            Event::RetryReceived { at } => {
                // §6.3: "Clients that receive a Retry packet reset congestion control and loss
                // recovery state, including resetting any pending timers."  (The RTT estimate is
                // not loss recovery state; §6.3 only allows, not requires, a sample from the Retry.)
                for log in sent.iter_mut() {
                    log.clear_sent_before(at);
                }
                pto_count = 0;
            }
            Event::HandshakeConfirmed => confirmed = true,
            Event::PeerMaxAckDelay { max_ack_delay_ms } => max_ack_delay = max_ack_delay_ms,
        }
    }
    if est.has_sample {
        // §5.2: min_rtt only ever takes a lesser value here (no persistent congestion reset)
        result.lowest_min_rtt_ms = Some(est.min_rtt_ms);
    }
    if let Some(first) = first_latest {
        result.first_sample_inflated = first > INFLATED_FIRST_SAMPLE_RATIO * est.min_rtt_ms
            && first - est.min_rtt_ms > K_GRANULARITY_MS;
    }
    result
}

/// Appendix A.7 OnAckReceived, the RTT part: the sample's figures (the estimator's filled in by
/// the caller), or None.
#[allow(clippy::too_many_arguments)]
fn on_ack(time_ms: f64, space: u8, ranges: &[(i64, i64)], ack_delay_ms: Option<f64>, at: i64, est: &mut Estimator,
          log: &mut SentLog, result: &mut Replay, confirmed: bool, max_ack_delay: f64) -> Option<Sample> {
    if ranges.is_empty() {
        result.acks_without_sample += 1;
        return None;
    }
    let largest = if ranges.len() == 1 { ranges[0].1 } else { ranges.iter().map(|r| r.1).max().unwrap() };
    let (known, largest_at) = log.lookup(largest, at);
    if !known {
        result.acks_of_unknown_packets += 1;
    }
    let (newly_any, newly_eliciting) = log.take_ranges(ranges, at);
    // §5.1: "An endpoint generates an RTT sample on receiving an ACK frame that meets the
    // following two conditions: the largest acknowledged packet number is newly acknowledged,
    // and at least one of the newly acknowledged packets was ack-eliciting."
    let Some(largest_at) = largest_at.filter(|_| newly_any && newly_eliciting) else {
        result.acks_without_sample += 1;
        return None;
    };
    // §5.1: "latest_rtt = ack_time - send_time_of_largest_acked"
    let latest = time_ms - log.times[largest_at];
    let first = !est.has_sample;
    let (used, adjusted) = est.update(latest, ack_delay_ms.unwrap_or(0.0), space, confirmed, max_ack_delay);
    let mut flags = 0;
    if ack_delay_ms.is_some_and(|d| d > latest) {
        flags |= FLAG_ACK_DELAY_EXCEEDS_SAMPLE;
    }
    if !first && used > 0.0 && adjusted == latest {
        flags |= FLAG_ACK_DELAY_NOT_SUBTRACTED;
    }
    Some(Sample {
        event_index: at,
        time_ms,
        space,
        largest_acknowledged: largest,
        latest_rtt_ms: latest,
        ack_delay_ms,
        ack_delay_used_ms: if adjusted != latest { used } else { 0.0 },
        adjusted_rtt_ms: adjusted,
        min_rtt_ms: 0.0,
        smoothed_rtt_ms: 0.0,
        rttvar_ms: 0.0,
        pto_ms: None,
        pto_count: None,
        handshake_confirmed: false,
        flags,
    })
}
