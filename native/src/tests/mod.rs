//! The crate's unit tests, one file per pure module: the JSON parser's refusals and where it
//! reports them (`json`), each qlog generation's field spellings as staging reads them
//! (`event`), and RFC 9002's estimator and replay against figures worked out by hand from the
//! RFC (`recovery`).  `cargo test` runs them (`tests/test_native.py` does, in the suite).

mod capture;
mod event;
mod hostile;
mod json;
mod recovery;

use crate::event::{stage, Canon, Layout, Records, StageError, StageOptions, Staged};

/// Object events (qlog ≥ 0.2).
const OBJECT: Layout = Layout { object: true, time: -1, category: -1, event: -1, data: -1, group: -1 };

fn options(records: Records, layout: Layout) -> StageOptions {
    StageOptions {
        records,
        layout,
        delta: false,
        time_scale_ms: 1.0,
        delta_carry: None,
        traces: Vec::new(),
        trace_index: 0,
    }
}

/// Python's routing, as far as these tests need it: an event's name without its category.
fn canonical(name: &str) -> Result<Canon, String> {
    Ok(Canon::of(name.rsplit(':').next().unwrap_or(name)))
}

/// Stage `text` as the options say.
fn stage_with(text: &[u8], opts: &StageOptions) -> Result<Staged, StageError> {
    stage(text.to_vec(), opts, &mut canonical)
}

/// Stage `text`: object events, one per line.
fn stage_lines(text: &str) -> Staged {
    stage_with(text.as_bytes(), &options(Records::Lines, OBJECT)).expect("stages")
}
