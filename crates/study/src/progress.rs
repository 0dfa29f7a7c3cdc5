//! The progress bar on stderr while a study runs (or its lines alone without one).

/// Progress on stderr: a bar of trials when shown, else only the lines printed through it.
pub(crate) struct Progress {
    bar: Option<indicatif::ProgressBar>,
}

impl Progress {
    /// A bar of `total` trials when `show`, else none.
    pub(crate) fn new(show: bool, total: usize) -> Progress {
        let bar = show.then(|| {
            let b = indicatif::ProgressBar::with_draw_target(
                Some(total as u64),
                indicatif::ProgressDrawTarget::stderr(),
            );
            if let Ok(style) = indicatif::ProgressStyle::with_template(
                "{elapsed_precise} [{bar:30}] {pos}/{len} trials, ~{eta} left (at most) {msg}",
            ) {
                b.set_style(style.progress_chars("=> "));
            }
            b
        });
        Progress { bar }
    }
    /// The bar's message: what runs now.
    pub(crate) fn message(&self, m: String) {
        if let Some(b) = &self.bar {
            b.set_message(m);
        }
    }
    /// One trial done.
    pub(crate) fn inc(&self) {
        if let Some(b) = &self.bar {
            b.inc(1);
        }
    }
    /// `by` trials fewer to run (configurations left the race).
    pub(crate) fn shrink(&self, by: usize) {
        if let Some(b) = &self.bar
            && let Some(len) = b.length()
        {
            b.set_length(len.saturating_sub(by as u64).max(b.position()));
        }
    }
    /// A line above the bar (on stderr without one).
    pub(crate) fn println(&self, m: String) {
        match &self.bar {
            Some(b) => b.println(m),
            None => eprintln!("{m}"),
        }
    }
    /// Clears the bar.
    pub(crate) fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}
