//! Lower-casing fast for the mostly-ASCII texts a search reads.

/// `str::to_lowercase`, with the ASCII runs of a mostly-ASCII text lowercased a run at a time:
/// std's goes a char at a time from the first non-ASCII one on (a curly quote early in a turn),
/// and a search lowercases every candidate's text when the query names someone.
pub fn lowercase(text: &str) -> String {
    // A final sigma lowercases by its context (σ or ς): std's rule, not repeated here.
    if text.contains('Σ') {
        return text.to_lowercase();
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    loop {
        let run = rest.bytes().position(|b| !b.is_ascii()).unwrap_or(rest.len());
        let start = out.len();
        out.push_str(&rest[..run]);
        out[start..].make_ascii_lowercase();
        rest = &rest[run..];
        let Some(c) = rest.chars().next() else { return out };
        out.extend(c.to_lowercase());
        rest = &rest[c.len_utf8()..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lowercase_is_std_s() {
        for text in [
            "",
            "Plain ASCII, Mixed Case 123",
            "Melanie(user):I’m SO glad — it’s ÄÖÜ time! İstanbul, ΣΟΦΙΑ Σ, 北京 ABC, ǅ ﬁ",
            "Ünïcödé first, then ASCII TAIL",
            "ASCII head, then É",
        ] {
            assert_eq!(lowercase(text), text.to_lowercase(), "{text}");
        }
    }
}
