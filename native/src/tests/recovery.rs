//! The RFC 9002 replay (`crate::recovery`) against worked examples: every expected figure below
//! is computed by hand from RFC 9002 §5.3 and §6.2 (numbers chosen so that each step is exact in
//! binary floating point), not by running the code.
//!
//! §5.3: on the first sample "smoothed_rtt = latest_rtt; rttvar = latest_rtt / 2"; on later ones
//! "adjusted_rtt = latest_rtt; if (latest_rtt >= min_rtt + ack_delay): adjusted_rtt = latest_rtt -
//! ack_delay; smoothed_rtt = 7/8 * smoothed_rtt + 1/8 * adjusted_rtt; rttvar_sample =
//! abs(smoothed_rtt - adjusted_rtt); rttvar = 3/4 * rttvar + 1/4 * rttvar_sample" (rttvar from
//! the previous smoothed_rtt: erratum 7539, as Appendix A.7).  §6.2.1: "PTO = smoothed_rtt +
//! max(4*rttvar, kGranularity) + max_ack_delay", max_ack_delay 0 in the Initial and Handshake
//! spaces.

use crate::recovery::{
    replay, Estimator, Event, Replay, Sample, SentLog, APPLICATION, FLAG_ACK_DELAY_NOT_SUBTRACTED,
    FLAG_FIRST_SAMPLE_INFLATED, HANDSHAKE, INITIAL,
};

/// An estimator after a first sample of `rtt` ms.
fn after_first(rtt: f64) -> Estimator {
    let mut est = Estimator::default();
    assert_eq!(est.update(rtt, 0.0, INITIAL, false, 25.0), (0.0, rtt));
    est
}

fn figures(est: &Estimator) -> (f64, f64, f64) {
    (est.min_rtt_ms, est.smoothed_rtt_ms, est.rttvar_ms)
}

/// Replay `events` against the packets sent: (number, time, ack-eliciting, position) per space.
fn run(events: &[Event], sent: [&[(i64, f64, bool, i64)]; 3], is_client: bool, pto_observable: bool)
       -> (Vec<Sample>, Replay) {
    let mut logs = sent.map(|packets| {
        SentLog::new(packets.iter().map(|p| p.0).collect(), packets.iter().map(|p| p.1).collect(),
                     packets.iter().map(|p| p.2).collect(), packets.iter().map(|p| p.3).collect())
    });
    let mut samples = Vec::new();
    let result = replay(events.iter().copied(), is_client, pto_observable, &mut logs, &mut |s| samples.push(s.clone()));
    (samples, result)
}

#[test]
fn first_sample_sets_the_estimate_and_the_pto() {
    let mut est = Estimator::default();
    assert_eq!(est.pto_ms(INITIAL, false, 0.0), Some(999.0));
    est.update(100.0, 0.0, INITIAL, false, 25.0);
    assert_eq!((est.smoothed_rtt_ms, est.rttvar_ms), (100.0, 50.0));
    assert_eq!(est.pto_ms(INITIAL, false, 25.0), Some(300.0));
    assert_eq!(est.pto_ms(APPLICATION, false, 25.0), None);
    assert_eq!(est.pto_ms(APPLICATION, true, 25.0), Some(325.0));
}

#[test]
fn acknowledged_packets_leave_the_log_once() {
    let mut log = SentLog::new(vec![0, 1, 2, 3], vec![0.0; 4], vec![true, false, true, true], vec![0, 1, 2, 3]);
    assert_eq!(log.take_ranges(&[(1, 1)], 10), (true, false));
    assert_eq!(log.take_ranges(&[(0, 2)], 10), (true, true));
    assert_eq!(log.take_ranges(&[(0, 2)], 10), (false, false));
    assert_eq!(log.lookup(3, 10), (true, Some(3)));
    assert_eq!(log.lookup(3, 3), (true, None)); // sent after the ACK's position
    assert_eq!(log.lookup(7, 10), (false, None));
}

#[test]
fn before_any_sample_the_pto_is_999_ms_from_the_333_ms_initial_rtt() {
    // §6.2.2 kInitialRtt 333 ms, §5.3 "smoothed_rtt = kInitialRtt; rttvar = kInitialRtt / 2":
    // PTO = 333 + max(4 · 166.5, 1) = 333 + 666 = 999
    let est = Estimator::default();
    assert_eq!((est.smoothed_rtt_ms, est.rttvar_ms, est.has_sample), (333.0, 166.5, false));
    assert_eq!(est.pto_ms(INITIAL, false, 25.0), Some(999.0));
    assert_eq!(est.pto_ms(HANDSHAKE, false, 25.0), Some(999.0));
    // Application Data: not armed before confirmation; then + max_ack_delay: 999 + 25
    assert_eq!(est.pto_ms(APPLICATION, false, 25.0), None);
    assert_eq!(est.pto_ms(APPLICATION, true, 25.0), Some(1024.0));
}

#[test]
fn the_first_sample_is_taken_whole_whatever_the_ack_delay() {
    // min_rtt = smoothed_rtt = 120, rttvar = 60; the ack_delay is not used on the first sample
    let mut est = Estimator::default();
    assert_eq!(est.update(120.0, 10.0, APPLICATION, true, 25.0), (0.0, 120.0));
    assert_eq!((est.latest_rtt_ms, est.has_sample), (120.0, true));
    assert_eq!(figures(&est), (120.0, 120.0, 60.0));
    // PTO = 120 + max(240, 1) = 360; Application Data + 25 = 385
    assert_eq!(est.pto_ms(HANDSHAKE, true, 25.0), Some(360.0));
    assert_eq!(est.pto_ms(APPLICATION, true, 25.0), Some(385.0));
}

#[test]
fn a_later_sample_moves_the_averages_by_an_eighth_and_a_quarter() {
    // first 100: smoothed 100, rttvar 50.  Then latest 140, ack_delay 20 (Handshake, not
    // confirmed: max_ack_delay not applied): 140 >= 100 + 20, adjusted = 120;
    // rttvar = 3/4 · 50 + 1/4 · |100 − 120| = 37.5 + 5 = 42.5
    // smoothed = 7/8 · 100 + 1/8 · 120 = 87.5 + 15 = 102.5
    let mut est = after_first(100.0);
    assert_eq!(est.update(140.0, 20.0, HANDSHAKE, false, 25.0), (20.0, 120.0));
    assert_eq!(figures(&est), (100.0, 102.5, 42.5));
    // PTO = 102.5 + max(4 · 42.5, 1) = 102.5 + 170 = 272.5
    assert_eq!(est.pto_ms(HANDSHAKE, false, 25.0), Some(272.5));
}

#[test]
fn rttvar_is_updated_from_the_previous_smoothed_rtt() {
    // erratum 7539: first 100 (smoothed 100, rttvar 50), then adjusted 300:
    // rttvar = 3/4 · 50 + 1/4 · |100 − 300| = 37.5 + 50 = 87.5 (from the new smoothed_rtt, 125,
    // it would be 37.5 + 43.75 = 81.25); smoothed = 87.5 + 37.5 = 125
    let mut est = after_first(100.0);
    est.update(300.0, 0.0, HANDSHAKE, false, 25.0);
    assert_eq!(figures(&est), (100.0, 125.0, 87.5));
}

#[test]
fn the_ack_delay_is_not_subtracted_below_min_rtt() {
    // min_rtt 100; latest 110, ack_delay 20: 110 < 100 + 20, adjusted stays 110
    // rttvar = 37.5 + 1/4 · 10 = 40; smoothed = 87.5 + 13.75 = 101.25
    let mut est = after_first(100.0);
    assert_eq!(est.update(110.0, 20.0, HANDSHAKE, false, 25.0), (20.0, 110.0));
    assert_eq!(figures(&est), (100.0, 101.25, 40.0));
    // exactly min_rtt + ack_delay is subtracted: latest 120, ack_delay 20 → adjusted 100
    let mut est = after_first(100.0);
    assert_eq!(est.update(120.0, 20.0, HANDSHAKE, false, 25.0), (20.0, 100.0));
    assert_eq!(figures(&est), (100.0, 100.0, 37.5));
}

#[test]
fn after_confirmation_the_ack_delay_is_capped_by_max_ack_delay() {
    // §5.3 "MUST use the lesser of the acknowledgment delay and the peer's max_ack_delay after
    // the handshake is confirmed": latest 200, ack_delay 50, max_ack_delay 25 → adjusted 175
    // rttvar = 37.5 + 1/4 · 75 = 56.25; smoothed = 87.5 + 21.875 = 109.375
    let mut est = after_first(100.0);
    assert_eq!(est.update(200.0, 50.0, APPLICATION, true, 25.0), (25.0, 175.0));
    assert_eq!(figures(&est), (100.0, 109.375, 56.25));
    // PTO = 109.375 + 4 · 56.25 + 25 = 359.375
    assert_eq!(est.pto_ms(APPLICATION, true, 25.0), Some(359.375));
    // before confirmation the whole 50 is subtracted: adjusted 150
    // rttvar = 37.5 + 12.5 = 50; smoothed = 87.5 + 18.75 = 106.25
    let mut est = after_first(100.0);
    assert_eq!(est.update(200.0, 50.0, APPLICATION, false, 25.0), (50.0, 150.0));
    assert_eq!(figures(&est), (100.0, 106.25, 50.0));
}

#[test]
fn acknowledgments_of_initial_packets_ignore_the_ack_delay() {
    // §5.3 "MAY ignore the acknowledgment delay for Initial packets": latest 130, ack_delay 20 →
    // adjusted 130; rttvar = 37.5 + 7.5 = 45; smoothed = 87.5 + 16.25 = 103.75
    let mut est = after_first(100.0);
    assert_eq!(est.update(130.0, 20.0, INITIAL, false, 25.0), (0.0, 130.0));
    assert_eq!(figures(&est), (100.0, 103.75, 45.0));
}

#[test]
fn min_rtt_is_the_least_latest_rtt_before_any_ack_delay() {
    // §5.2: min_rtt does not adjust for acknowledgment delays
    let mut est = after_first(100.0);
    est.update(80.0, 0.0, HANDSHAKE, false, 25.0);
    assert_eq!(est.min_rtt_ms, 80.0);
    // latest 120, ack_delay 30: 120 >= 80 + 30 → adjusted 90; min_rtt stays 80, not 90
    assert_eq!(est.update(120.0, 30.0, HANDSHAKE, false, 25.0), (30.0, 90.0));
    assert_eq!(est.min_rtt_ms, 80.0);
    // latest 85, ack_delay 10: 85 < 80 + 10 → not subtracted
    assert_eq!(est.update(85.0, 10.0, HANDSHAKE, false, 25.0), (10.0, 85.0));
    assert_eq!(est.min_rtt_ms, 80.0);
}

#[test]
fn the_variance_term_of_the_pto_is_at_least_k_granularity() {
    // a steady 10 ms: smoothed stays 10, rttvar = 5 · (3/4)^k.  After 10 more samples
    // 4 · rttvar = 20 · 59049/1048576 ≈ 1.126 > 1 ms; after 11, 20 · 177147/4194304 ≈ 0.845 < 1,
    // and kGranularity (1 ms) takes its place: PTO = 10 + 1
    let mut est = after_first(10.0);
    for _ in 0..10 {
        est.update(10.0, 0.0, HANDSHAKE, false, 25.0);
    }
    assert_eq!(figures(&est), (10.0, 10.0, 5.0 * 59049.0 / 1048576.0));
    assert_eq!(est.pto_ms(HANDSHAKE, false, 25.0), Some(10.0 + 20.0 * 59049.0 / 1048576.0));
    est.update(10.0, 0.0, HANDSHAKE, false, 25.0);
    assert_eq!(est.rttvar_ms, 5.0 * 177147.0 / 4194304.0);
    assert_eq!(est.pto_ms(HANDSHAKE, false, 25.0), Some(11.0));
    assert_eq!(est.pto_ms(APPLICATION, true, 25.0), Some(36.0));
}

#[test]
fn the_pto_backoff_doubles_with_each_expiry_until_an_ack_resets_it() {
    // a client's Initial packet 0 sent at 0 ms, two PTO expiries, its ACK at 100 ms:
    // latest 100, smoothed 100, rttvar 50, PTO = 100 + 200 = 300, backed off 300 · 2² = 1200.
    // §6.2.1: "a client does not reset the PTO backoff factor on receiving acknowledgments in
    // Initial packets" (before the server's address is validated, Appendix A.8)
    let sent: [&[(i64, f64, bool, i64)]; 3] = [&[(0, 0.0, true, 0)], &[(0, 150.0, true, 5)], &[]];
    let events = [
        Event::PtoExpired,
        Event::PtoExpired,
        Event::Ack { time_ms: 100.0, space: INITIAL, ranges: &[(0, 0)], ack_delay_ms: None, at: 3 },
        Event::PtoExpired,
        Event::Ack { time_ms: 190.0, space: HANDSHAKE, ranges: &[(0, 0)], ack_delay_ms: Some(0.0), at: 6 },
    ];
    let (samples, _) = run(&events, sent, true, true);
    let s = &samples[0];
    assert_eq!((s.latest_rtt_ms, s.smoothed_rtt_ms, s.rttvar_ms, s.pto_ms), (100.0, 100.0, 50.0, Some(300.0)));
    assert_eq!((s.pto_count, s.pto_backoff_ms()), (Some(2), Some(1200.0)));
    // a Handshake ACK resets it (and is the second sample: latest 40, adjusted 40;
    // rttvar = 37.5 + 15 = 52.5, smoothed = 87.5 + 5 = 92.5; PTO = 92.5 + 210 = 302.5)
    let s = &samples[1];
    assert_eq!((s.latest_rtt_ms, s.smoothed_rtt_ms, s.rttvar_ms, s.pto_ms), (40.0, 92.5, 52.5, Some(302.5)));
    assert_eq!((s.pto_count, s.pto_backoff_ms()), (Some(0), Some(302.5)));
    // a server resets it on any ACK; a trace that does not show expiries has no count
    let (samples, _) = run(&events[..3], sent, false, true);
    assert_eq!((samples[0].pto_count, samples[0].pto_backoff_ms()), (Some(0), Some(300.0)));
    let (samples, _) = run(&events[..3], sent, true, false);
    assert_eq!((samples[0].pto_count, samples[0].pto_backoff_ms()), (None, None));
}

#[test]
fn only_an_ack_newly_acknowledging_its_largest_and_an_eliciting_packet_is_a_sample() {
    // §5.1: "the largest acknowledged packet number is newly acknowledged, and at least one of
    // the newly acknowledged packets was ack-eliciting"
    let sent: [&[(i64, f64, bool, i64)]; 3] = [&[], &[(0, 0.0, true, 0), (1, 10.0, false, 1), (2, 20.0, true, 2)], &[]];
    let ack = |time_ms, ranges, at| Event::Ack { time_ms, space: HANDSHAKE, ranges, ack_delay_ms: None, at };
    let events = [
        ack(50.0, &[(1, 1)][..], 3),       // only a non-eliciting packet: no sample
        ack(60.0, &[(0, 2)][..], 4),       // 0 and 2 new, 2 the largest: latest = 60 − 20 = 40
        ack(70.0, &[(0, 2)][..], 5),       // nothing new: no sample
        ack(80.0, &[(0, 2), (9, 9)][..], 6), // a packet never sent: no sample, counted
    ];
    let (samples, result) = run(&events, sent, false, true);
    assert_eq!(samples.len(), 1);
    let s = &samples[0];
    assert_eq!((s.event_index, s.largest_acknowledged, s.latest_rtt_ms, s.adjusted_rtt_ms), (4, 2, 40.0, 40.0));
    assert_eq!((result.sample_count, result.acks_without_sample, result.acks_of_unknown_packets), (1, 3, 1));
    assert_eq!(result.lowest_min_rtt_ms, Some(40.0));
}

#[test]
fn the_replay_caps_the_ack_delay_with_the_peers_max_ack_delay_once_confirmed() {
    // Application Data packets 0 at 0 ms and 1 at 100 ms; confirmed, peer max_ack_delay 10.
    // ACK of 0 at 50: first sample 50 (smoothed 50, rttvar 25).  ACK of 1 at 200 with
    // ack_delay 30: latest 100, used min(30, 10) = 10, adjusted 90;
    // rttvar = 3/4 · 25 + 1/4 · |50 − 90| = 18.75 + 10 = 28.75; smoothed = 43.75 + 11.25 = 55
    // PTO = 55 + 4 · 28.75 + 10 = 180
    let sent: [&[(i64, f64, bool, i64)]; 3] = [&[], &[], &[(0, 0.0, true, 2), (1, 100.0, true, 4)]];
    let events = [
        Event::HandshakeConfirmed,
        Event::PeerMaxAckDelay { max_ack_delay_ms: 10.0 },
        Event::Ack { time_ms: 50.0, space: APPLICATION, ranges: &[(0, 0)], ack_delay_ms: Some(5.0), at: 3 },
        Event::Ack { time_ms: 200.0, space: APPLICATION, ranges: &[(0, 1)], ack_delay_ms: Some(30.0), at: 5 },
    ];
    let (samples, _) = run(&events, sent, true, true);
    let s = &samples[1];
    assert_eq!((s.latest_rtt_ms, s.ack_delay_ms, s.ack_delay_used_ms, s.adjusted_rtt_ms), (100.0, Some(30.0), 10.0, 90.0));
    assert_eq!((s.min_rtt_ms, s.smoothed_rtt_ms, s.rttvar_ms, s.pto_ms), (50.0, 55.0, 28.75, Some(180.0)));
    assert!(s.handshake_confirmed);
    assert_eq!(samples[0].ack_delay_used_ms, 0.0); // (the first sample uses none)
}

#[test]
fn a_packet_declared_lost_yields_no_sample_when_acknowledged_late() {
    // Appendix A.10: a lost packet leaves sent_packets, so its late ACK is no RTT sample
    let sent: [&[(i64, f64, bool, i64)]; 3] = [&[], &[], &[(0, 0.0, true, 0)]];
    let events = [
        Event::Lost { space: APPLICATION, packet_number: 0, at: 1 },
        Event::Ack { time_ms: 500.0, space: APPLICATION, ranges: &[(0, 0)], ack_delay_ms: None, at: 2 },
    ];
    let (samples, result) = run(&events, sent, false, true);
    assert!(samples.is_empty());
    assert_eq!((result.acks_without_sample, result.acks_of_unknown_packets), (1, 0));
}

#[test]
fn samples_are_flagged_when_the_ack_delay_was_not_subtracted_or_the_first_was_inflated() {
    // Handshake packets 0, 1, 2 at 0, 200, 300 ms.  First sample 150 (ACK at 150); then 60
    // with ack_delay 20 (60 < 60 + 20: not subtracted, min_rtt 60); then 70 (ACK at 370).
    // The first, 150, is more than 1.5 · 60 and 1 ms above it: inflated.
    let sent: [&[(i64, f64, bool, i64)]; 3] = [&[], &[(0, 0.0, true, 0), (1, 200.0, true, 1), (2, 300.0, true, 2)], &[]];
    let events = [
        Event::Ack { time_ms: 150.0, space: HANDSHAKE, ranges: &[(0, 0)], ack_delay_ms: None, at: 3 },
        Event::Ack { time_ms: 260.0, space: HANDSHAKE, ranges: &[(0, 1)], ack_delay_ms: Some(20.0), at: 4 },
        Event::Ack { time_ms: 370.0, space: HANDSHAKE, ranges: &[(0, 2)], ack_delay_ms: Some(0.0), at: 5 },
    ];
    let (samples, result) = run(&events, sent, false, true);
    let flags: Vec<u8> = samples.iter().map(|s| s.flags).collect();
    assert_eq!(flags, [0, FLAG_ACK_DELAY_NOT_SUBTRACTED, 0]);
    assert_eq!(samples[1].ack_delay_used_ms, 0.0);
    assert_eq!(samples.iter().map(|s| s.latest_rtt_ms).collect::<Vec<_>>(), [150.0, 60.0, 70.0]);
    assert!(result.first_sample_inflated);
    assert_eq!(result.lowest_min_rtt_ms, Some(60.0));
    let _ = FLAG_FIRST_SAMPLE_INFLATED; // (set on the first row by the caller, `Replayer`)
}
