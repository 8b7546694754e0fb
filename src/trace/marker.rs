//! The text of a trace's markers, encoded and decoded here only.
//!
//! `chunkscope gc` on a mount (and the demo, and the simulator) marks each phase's start and
//! end: `phase1 start strategy=lru` ... `phase1 end strategy=lru`, then the same for
//! `phase2`. An analysis cuts the trace into sections at markers: a phase's start opens the
//! section `phase1 strategy=lru`, its end closes it. Any other text (`chunkscope ctl MNT mark
//! TEXT`) is a marker too: `X start Y` opens section `X Y`, a text with ` end` closes the
//! section, anything else opens a section of its own name.

/// A marker's meaning.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Marker {
    /// A GC phase begins (`start`) or ends: phase 1 (mark) or 2 (sweep), with its strategy.
    Phase {
        /// PBS's phase number (1 or 2).
        number: u8,
        /// True at its start, false at its end.
        start: bool,
        /// The strategy's name.
        strategy: String,
    },
    /// A GC phase's start or end that [`super::phases`] inferred from the requests of a trace
    /// without markers (a real PBS's GC through the mount): never written by chunkscope.
    Inferred {
        /// PBS's phase number (1 or 2).
        number: u8,
        /// True at its start, false at its end.
        start: bool,
    },
    /// Any other text.
    Text(String),
}

impl Marker {
    /// The marker of phase `number`'s start or end, run with `strategy`.
    pub fn phase(number: u8, start: bool, strategy: &str) -> Marker {
        Marker::Phase {
            number,
            start,
            strategy: strategy.to_string(),
        }
    }

    /// The name of the section phase `number` of a GC with `strategy` makes in an analysis.
    pub fn section_name(number: u8, strategy: &str) -> String {
        format!("phase{number} strategy={strategy}")
    }

    /// The name of the section an inferred phase `number` makes in an analysis.
    pub fn inferred_section_name(number: u8) -> String {
        format!("phase{number} (inferred)")
    }

    /// The phase this marks the start or end of, marked or inferred: (number, start).
    pub fn phase_edge(&self) -> Option<(u8, bool)> {
        match self {
            Marker::Phase { number, start, .. } | Marker::Inferred { number, start } => {
                Some((*number, *start))
            }
            Marker::Text(_) => None,
        }
    }

    /// The marker's text, as the trace stores it.
    pub fn encode(&self) -> String {
        match self {
            Marker::Phase {
                number,
                start,
                strategy,
            } => {
                let edge = if *start { "start" } else { "end" };
                format!("phase{number} {edge} strategy={strategy}")
            }
            Marker::Inferred { number, start } => {
                let edge = if *start { "start" } else { "end" };
                format!("phase{number} {edge} (inferred)")
            }
            Marker::Text(t) => t.clone(),
        }
    }

    /// What a trace's marker text means.
    pub fn decode(text: &str) -> Marker {
        let phase = || -> Option<Marker> {
            let (head, rest) = text.strip_prefix("phase")?.split_once(' ')?;
            let number: u8 = head.parse().ok()?;
            if number.to_string() != head {
                return None; // "phase01", "phase+1"
            }
            match rest {
                "start (inferred)" => {
                    return Some(Marker::Inferred {
                        number,
                        start: true,
                    })
                }
                "end (inferred)" => {
                    return Some(Marker::Inferred {
                        number,
                        start: false,
                    })
                }
                _ => {}
            }
            let (start, strategy) = match rest.strip_prefix("start strategy=") {
                Some(s) => (true, s),
                None => (false, rest.strip_prefix("end strategy=")?),
            };
            (!strategy.is_empty() && !strategy.contains(' '))
                .then(|| Marker::phase(number, start, strategy))
        };
        phase().unwrap_or_else(|| Marker::Text(text.to_string()))
    }

    /// The section this marker opens in an analysis, or `None` for one that closes a section.
    pub fn section(&self) -> Option<String> {
        match self {
            Marker::Phase {
                number,
                start: true,
                strategy,
            } => Some(Marker::section_name(*number, strategy)),
            Marker::Phase { start: false, .. } | Marker::Inferred { start: false, .. } => None,
            Marker::Inferred {
                number,
                start: true,
            } => Some(Marker::inferred_section_name(*number)),
            Marker::Text(text) => {
                if let Some(i) = text.find(" start") {
                    return Some(format!("{}{}", &text[..i], &text[i + 6..]));
                }
                if text.contains(" end") {
                    return None;
                }
                Some(text.clone())
            }
        }
    }

    /// Whether this marks the end of phase `number`.
    pub fn ends(&self, number: u8) -> bool {
        self.phase_edge() == Some((number, false))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phase_markers_round_trip_and_open_their_sections() {
        for (number, start, strategy) in [(1, true, "lru"), (2, false, "inode-order")] {
            let m = Marker::phase(number, start, strategy);
            assert_eq!(Marker::decode(&m.encode()), m);
        }
        let begin = Marker::decode("phase1 start strategy=lru");
        assert_eq!(begin, Marker::phase(1, true, "lru"));
        assert_eq!(begin.section().as_deref(), Some("phase1 strategy=lru"));
        assert_eq!(Marker::section_name(1, "lru"), "phase1 strategy=lru");
        let end = Marker::decode("phase2 end strategy=naive");
        assert!(end.ends(2) && !end.ends(1) && !begin.ends(1));
        assert_eq!(end.section(), None);
    }

    #[test]
    fn inferred_markers_round_trip_and_open_sections_of_their_own() {
        for start in [true, false] {
            let m = Marker::Inferred { number: 2, start };
            assert_eq!(Marker::decode(&m.encode()), m);
            assert_eq!(m.phase_edge(), Some((2, start)));
        }
        let begin = Marker::Inferred {
            number: 1,
            start: true,
        };
        assert_eq!(begin.encode(), "phase1 start (inferred)");
        assert_eq!(begin.section().as_deref(), Some("phase1 (inferred)"));
        assert!(Marker::decode("phase1 end (inferred)").ends(1));
        assert_eq!(
            Marker::decode("phase1 start inferred"),
            Marker::Text("phase1 start inferred".into())
        );
    }

    #[test]
    fn other_text_is_text_with_the_old_section_rules() {
        for t in [
            "phase1 start",
            "phase1 start strategy=",
            "phase01 start strategy=lru",
            "phasex start strategy=lru",
            "phase1 begin strategy=lru",
            "phase1 start strategy=a b",
            "warm-up",
        ] {
            assert_eq!(Marker::decode(t), Marker::Text(t.into()), "{t}");
        }
        let s = |t: &str| Marker::decode(t).section();
        assert_eq!(s("warm start cache").as_deref(), Some("warm cache"));
        assert_eq!(s("warm end"), None);
        assert_eq!(s("warm-up").as_deref(), Some("warm-up"));
        assert_eq!(s("phase1 start").as_deref(), Some("phase1"));
    }
}
