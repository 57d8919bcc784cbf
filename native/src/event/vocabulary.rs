//! The vocabulary events are routed and typed by: event kinds, packet types, frame types.
//!
//! Theory of operation: each qlog generation names the same things its own way (`1RTT`,
//! `onertt`, `short`, `1RTT_PROTECTED`; `ACK`, `ack`; `transport:packet_sent`,
//! `quic:packet_sent`).  Python maps an event's name to its canonical one
//! (`quicack.qlog.dialect.canonical_event`), which `Canon::of` turns into the table the event goes
//! to; packet and frame types are read here, once per value, into the spelling the store uses
//! (`PType`, `FType`), with what RFC 9000 and RFC 9002 say of each (coalescing order, packet
//! number space, ack-eliciting).  Pure: no Python here.

use std::borrow::Cow;

/// What an event's canonical name routes it to (`quicack.qlog.dialect.canonical_event`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Canon {
    PacketSent,
    PacketReceived,
    ParametersSet,
    MetricsUpdated,
    PacketLost,
    PacketDropped,
    Timer,
    DatagramsReceived,
    ConnectionStarted,
    Other,
}

impl Canon {
    pub fn of(canonical: &str) -> Canon {
        match canonical {
            "packet_sent" => Canon::PacketSent,
            "packet_received" => Canon::PacketReceived,
            "parameters_set" => Canon::ParametersSet,
            "metrics_updated" => Canon::MetricsUpdated,
            "packet_lost" => Canon::PacketLost,
            "packet_dropped" => Canon::PacketDropped,
            "loss_timer_updated" | "timer_updated" => Canon::Timer,
            "datagrams_received" => Canon::DatagramsReceived,
            "connection_started" => Canon::ConnectionStarted,
            _ => Canon::Other,
        }
    }

    /// Events with a table of their own; all others go to `other_events`.
    pub fn routed(self) -> bool {
        !matches!(self, Canon::DatagramsReceived | Canon::ConnectionStarted | Canon::Other)
    }
}

/// The packet types the store uses (`packets.packet_type`), others in lower case as logged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PType {
    Initial,
    Handshake,
    ZeroRtt,
    OneRtt,
    Retry,
    VersionNegotiation,
    StatelessReset,
    Other(Box<str>),
}

impl PType {
    pub fn as_str(&self) -> &str {
        match self {
            PType::Initial => "initial",
            PType::Handshake => "handshake",
            PType::ZeroRtt => "0RTT",
            PType::OneRtt => "1RTT",
            PType::Retry => "retry",
            PType::VersionNegotiation => "version_negotiation",
            PType::StatelessReset => "stateless_reset",
            PType::Other(s) => s,
        }
    }

    /// RFC 9000 §12.2 coalescing order: Initial, 0-RTT, Handshake, then 1-RTT last.
    pub fn rank(&self) -> i32 {
        match self {
            PType::Initial => 0,
            PType::ZeroRtt => 1,
            PType::Handshake => 2,
            PType::OneRtt => 3,
            _ => 9,
        }
    }

    pub fn space(&self) -> Option<&'static str> {
        match self {
            PType::Initial => Some("initial"),
            PType::Handshake => Some("handshake"),
            PType::ZeroRtt | PType::OneRtt => Some("application_data"),
            _ => None,
        }
    }

    /// The type as every generation spells it ('1RTT', '1rtt', 'onertt', 'short', '1RTT_PROTECTED'…).
    pub fn of(raw: &str) -> PType {
        match raw {
            "initial" => return PType::Initial,
            "handshake" => return PType::Handshake,
            "1RTT" => return PType::OneRtt,
            "0RTT" => return PType::ZeroRtt,
            "retry" => return PType::Retry,
            _ => {}
        }
        let lower = raw.to_lowercase();
        let squeezed: String = lower.chars().filter(|&c| c != '-' && c != '_').collect();
        match squeezed.as_str() {
            "initial" => PType::Initial,
            "handshake" => PType::Handshake,
            "0rtt" | "zerortt" | "0rttprotected" => PType::ZeroRtt,
            "1rtt" | "onertt" | "short" | "1rttprotected" | "protected" => PType::OneRtt,
            "retry" => PType::Retry,
            "versionnegotiation" | "versionnegotation" => PType::VersionNegotiation,
            "statelessreset" => PType::StatelessReset,
            _ => PType::Other(lower.into_boxed_str()),
        }
    }
}

/// Frame types: the qlog names, lower case, blanks as '_'.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FType {
    Ack,
    Stream,
    Padding,
    Crypto,
    Ping,
    Other(Box<str>),
}

impl FType {
    pub fn as_str(&self) -> &str {
        match self {
            FType::Ack => "ack",
            FType::Stream => "stream",
            FType::Padding => "padding",
            FType::Crypto => "crypto",
            FType::Ping => "ping",
            FType::Other(s) => s,
        }
    }

    /// The type of a frame logged with `frame_type` (qlog ≥ 0.1) or `type`: a known one as
    /// `frame_type` spells it, else the name in lower case, blanks as '_'.
    pub fn of(frame_type: Option<Cow<str>>, type_: Option<Cow<str>>) -> FType {
        if let Some(t) = &frame_type {
            if let Some(known) = FType::known(t) {
                return known;
            }
        }
        let name = frame_type.or(type_).unwrap_or(Cow::Borrowed("unknown")).to_lowercase().replace(' ', "_");
        FType::known(&name).unwrap_or_else(|| FType::Other(name.into_boxed_str()))
    }

    fn known(name: &str) -> Option<FType> {
        Some(match name {
            "ack" => FType::Ack,
            "stream" => FType::Stream,
            "padding" => FType::Padding,
            "crypto" => FType::Crypto,
            "ping" => FType::Ping,
            _ => return None,
        })
    }

    /// RFC 9002 §2: "Packets that contain ack-eliciting frames elicit an ACK from the receiver
    /// ... ACK, PADDING, and CONNECTION_CLOSE frames" are the exceptions (draft-era qlogs name
    /// the application CONNECTION_CLOSE, 0x1d, APPLICATION_CLOSE).
    pub fn eliciting(&self) -> bool {
        match self {
            FType::Ack | FType::Padding => false,
            FType::Other(s) => !matches!(&**s, "connection_close" | "application_close"),
            _ => true,
        }
    }

    /// Frames whose every field has a column; others keep the logged frame in `frames.details`.
    pub fn has_columns(&self) -> bool {
        !matches!(self, FType::Other(_))
    }
}
