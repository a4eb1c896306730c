//! How the tool prints an error: one line, each cause once.
//!
//! The rule: the error's chain (the command's contexts, then the library error and its sources)
//! is printed outermost first, joined by `: `, leaving out any cause whose message the line
//! already holds. The library's errors include their cause in their own message (so that
//! `{error}` alone says everything, for a program that prints no chain) and also return it as
//! their `source()`; printing the chain with `{:#}` would repeat it, once per level.

/// `error` as one line: its contexts and causes, outermost first, each message once.
pub fn error_line(error: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in error.chain() {
        let message = cause.to_string();
        if line.contains(&message) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&message);
    }
    line
}

#[cfg(test)]
mod tests {
    use std::io;

    use super::*;

    /// An error whose message embeds its source's and which also returns it, as thiserror's
    /// `#[error("... {source}")]` with `#[source]` does.
    #[derive(Debug)]
    struct Wrapping {
        context: &'static str,
        source: Box<dyn std::error::Error + Send + Sync>,
    }

    impl std::fmt::Display for Wrapping {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "{}: {}", self.context, self.source)
        }
    }

    impl std::error::Error for Wrapping {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(self.source.as_ref())
        }
    }

    #[test]
    fn a_cause_already_in_the_line_is_not_repeated() {
        let os = io::Error::from(io::ErrorKind::PermissionDenied);
        let os_message = os.to_string();
        let open = Wrapping {
            context: "open d/t-0/00000000000000000000.log",
            source: Box::new(os),
        };
        let partition = Wrapping {
            context: "partition t-0 cannot be opened",
            source: Box::new(open),
        };
        let error = anyhow::Error::new(partition).context("cannot append to t-0");
        assert_eq!(
            format!("{error:#}").matches(&os_message).count(),
            3,
            "{{:#}} repeats the cause at every level: {error:#}"
        );
        assert_eq!(
            error_line(&error),
            format!(
                "cannot append to t-0: partition t-0 cannot be opened: open \
                 d/t-0/00000000000000000000.log: {os_message}"
            )
        );
    }

    #[test]
    fn contexts_whose_causes_say_something_new_are_all_kept() {
        let error = anyhow::anyhow!("root cause")
            .context("middle")
            .context("outer");
        assert_eq!(error_line(&error), "outer: middle: root cause");
    }
}
