//! One line for an error and its causes, for errors that must travel as text (a model
//! backend's failure inside the search, a failed save reported through the metric sink).

/// `err` and its sources, joined with ": ".
pub fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn joins_every_cause() {
        let err = Outer(std::io::Error::other("inner"));
        assert_eq!(super::error_chain(&err), "outer: inner");
    }
}
