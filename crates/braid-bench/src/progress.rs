//! A progress bar on stderr, so stdout stays clean for the summary table.
//!
//! indicatif hides the bar by itself when stderr is not a terminal (CI, pipes, tests).

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

pub fn bar(total: u64, scenario: &str) -> ProgressBar {
    let pb = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template(
        "{prefix} [{elapsed_precise}] {wide_bar} {pos}/{len} requests {msg}",
    ) {
        pb.set_style(style);
    }
    pb.set_prefix(scenario.to_string());
    pb
}
