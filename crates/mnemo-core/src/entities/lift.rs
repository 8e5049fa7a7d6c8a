//! Who a question names, by the role the memory also knows them by: "What does Ingrid do for a
//! living?" finds "My sister is a veterinarian in Oslo" through "my sister Ingrid arrived on
//! Saturday". The name's own words are the full-text half's to find; the role is what no word
//! of the question matches.

use super::{is_role, key};

/// The roles a search's candidates give what a question names: "my sister" where a text says
/// "my sister Ingrid" or "Ingrid, my sister" (a Chinese role, 姐姐 in 我姐姐小雨, is matched
/// alone), unless a text ties the role to another name too ("my friend Jake" and "my friend
/// Mel": neither is "my friend"). A name that most texts hold (a speaker of every turn, the user)
/// tells none apart and is left out. A word scan, no tagging: it runs on every search that
/// names someone.
#[derive(Debug, Default)]
pub struct Aliases {
    /// How a text names one of them by role (lowercased): "my sister", "our sister", 姐姐.
    needles: Vec<String>,
    /// The roles alone ("sister", 姐姐): words to search for.
    roles: Vec<String>,
}

impl Aliases {
    pub fn of(names: &[String], texts: &[&str]) -> Self {
        let mut out = Self::default();
        if names.is_empty() || texts.is_empty() {
            return out;
        }
        let lower: Vec<String> = texts.iter().map(|t| crate::text::lowercase(t)).collect();
        for name in names {
            let named: Vec<&String> = lower.iter().filter(|t| word_at(t, name).next().is_some()).collect();
            if named.is_empty() || named.len() * 2 > texts.len() {
                continue;
            }
            let mut roles: Vec<&str> = named
                .iter()
                .flat_map(|t| {
                    word_at(t, name)
                        .flat_map(|at| role_before(&t[..at]).into_iter().chain(role_after(&t[at + name.len()..])))
                })
                .collect();
            roles.sort_unstable();
            roles.dedup();
            roles.retain(|r| !texts.iter().zip(&lower).any(|(t, l)| names_another(t, l, r, name)));
            out.needles.extend(roles.iter().flat_map(|r| role_needles(r)));
            out.roles.extend(roles.iter().map(|r| r.to_string()));
        }
        out
    }

    /// No role found: nothing to lift or look for.
    pub fn is_empty(&self) -> bool {
        self.needles.is_empty()
    }

    /// Whether a text (lowercased) names one of them by its role.
    pub fn about(&self, lower: &str) -> bool {
        self.needles.iter().any(|n| word_at(lower, n).next().is_some())
    }

    /// The roles they go by ("sister"): a search looks for them too.
    pub fn roles(&self) -> &[String] {
        &self.roles
    }
}

/// Whose role ties it to the memory's owner: "my sister", "our dog" ("her sister" is someone
/// else's).
const OWNERS: [&str; 2] = ["my", "our"];

/// The role right before a name: "my sister " (English, owned), 姐姐 (Chinese).
fn role_before(before: &str) -> Option<&str> {
    if let Some(role) = super::ZH_ROLES.iter().find(|r| before.ends_with(**r)) {
        return Some(role);
    }
    let mut ws = before.trim_end().rsplit(|c: char| c.is_whitespace());
    let role = ws.next()?.trim_matches(|c: char| !c.is_alphanumeric());
    let owner = ws.next()?;
    (OWNERS.contains(&owner) && is_role(role) && role.is_ascii()).then_some(role)
}

/// The role in apposition right after a name: ", my wife", ", my old climbing partner" (up to
/// two words between the owner and the role).
pub(super) fn role_after(after: &str) -> Option<&str> {
    let rest = after.strip_prefix(',')?.trim_start();
    let mut ws = rest.split(|c: char| c.is_whitespace() || matches!(c, ',' | '.' | '!' | '?' | ';'));
    if !OWNERS.contains(&ws.next()?) {
        return None;
    }
    ws.take(3).find(|w| is_role(w) && w.is_ascii())
}

/// Whether `text` ties `role` to a name other than `name`: "my friend Mel" when the name is Jake.
/// English only (a Chinese name after its role is not told apart from any other word here).
fn names_another(text: &str, lower: &str, role: &str, name: &str) -> bool {
    if !role.is_ascii() || text.len() != lower.len() {
        return false;
    }
    role_needles(role).iter().any(|needle| {
        word_at(lower, needle).any(|at| {
            let Some(after) = text.get(at + needle.len()..) else { return false };
            let next = after.trim_start().split(|c: char| !c.is_alphanumeric()).next().unwrap_or("");
            next.starts_with(|c: char| c.is_uppercase()) && key(next) != *name && !name.starts_with(&key(next))
        })
    })
}

/// How a text names someone by a role: "my sister", "our sister" (English roles are owned), 姐姐
/// (Chinese).
fn role_needles(role: &str) -> Vec<String> {
    match role.is_ascii() {
        true => OWNERS.iter().map(|o| format!("{o} {role}")).collect(),
        false => vec![role.to_string()],
    }
}

/// Where `needle` (lowercased) is in `text` (lowercased), not inside a longer word ("max" is not
/// in "maximum"); Chinese has no word breaks, so any occurrence counts.
fn word_at<'a>(text: &'a str, needle: &'a str) -> impl Iterator<Item = usize> + 'a {
    let word = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    text.match_indices(needle).map(|(at, _)| at).filter(move |&at| {
        let glued_before =
            word(text[..at].chars().next_back()) && needle.starts_with(|c: char| c.is_ascii_alphanumeric());
        let glued_after =
            word(text[at + needle.len()..].chars().next()) && needle.ends_with(|c: char| c.is_ascii_alphanumeric());
        !(needle.is_empty() || glued_before || glued_after)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entities::key;

    fn about(names: &[&str], texts: &[&str]) -> Vec<bool> {
        let aliases = Aliases::of(&names.iter().map(|n| key(n)).collect::<Vec<_>>(), texts);
        texts.iter().map(|t| aliases.about(&t.to_lowercase())).collect()
    }

    #[test]
    fn a_name_finds_the_texts_that_say_the_role_tied_to_it() {
        let texts = [
            "Maya: My sister is flying in from Oslo next month. She's a veterinarian there.",
            "Maya: My sister Ingrid arrived on Saturday and we spent Sunday at Mount Rainier.",
            "Maya: Work at Zillow is fine, I go bouldering on weekends.",
            "Maya: My friend Mel visited.",
            "Maya: Tonkotsu ramen tonight.",
        ];
        assert_eq!(about(&["Ingrid"], &texts), [true, true, false, false, false]);
        // "my friend" is Mel's, not Ingrid's; a name without a role lifts nothing (its words
        // are the full-text search's).
        assert_eq!(about(&["Mel"], &texts), [false, false, false, true, false]);
        assert_eq!(about(&["Oslo"], &texts), [false; 5]);
        // The user is in every text: no lift.
        assert_eq!(about(&["Maya"], &texts), [false; 5]);
        // Not inside a longer word.
        assert_eq!(about(&["Max"], &["maximum effort", "my dog Max", "a", "b"]), [false, true, false, false]);
        // Two dogs: "my dog" is neither's.
        assert_eq!(about(&["Max"], &["My dog Maximus", "my dog Max", "a", "b"]), [false; 4]);
    }

    #[test]
    fn a_role_in_apposition_is_tied_too() {
        let texts = [
            "Grace: Fiona, my wife, found us a cheaper flour supplier.",
            "Grace: My wife does the books, she's an accountant by day.",
            "Grace: Mel, my old climbing partner from Seattle, visited.",
            "Grace: Our climbing partner moved away.",
            "Grace: The bakery opened.",
        ];
        assert_eq!(about(&["Fiona"], &texts), [true, true, false, false, false]);
        assert_eq!(about(&["Mel"], &texts), [false, false, false, false, false], "'my partner' is not said");
    }

    #[test]
    fn only_the_users_own_role_counts() {
        // Someone else's sister is not "my sister"; a comma after the role is no part of it.
        let texts = ["Mel said her sister Ingrid is a nurse.", "My sister is a vet.", "a", "b"];
        assert_eq!(about(&["Ingrid"], &texts), [false; 4]);
        let texts = ["Our dog, Max, ate the couch.", "Our dog is sick.", "My dog hates baths.", "a", "b"];
        assert_eq!(about(&["Max"], &texts), [true, true, true, false, false]);
    }

    #[test]
    fn a_role_tied_to_two_names_is_neither_ones() {
        let texts = ["My friend Jake came over.", "My friend Mel called.", "My friend is moving.", "x", "y"];
        assert_eq!(about(&["Jake"], &texts), [false; 5]);
        let aliases = Aliases::of(&[key("Jake")], &texts);
        assert!(aliases.roles().is_empty(), "{aliases:?}");
        let aliases = Aliases::of(&[key("Ingrid")], &["My sister Ingrid is here.", "x", "y"]);
        assert_eq!(aliases.roles(), ["sister"]);
    }

    #[test]
    fn a_chinese_role_is_found_without_my() {
        let texts = ["我姐姐小雨下个月从上海来。", "姐姐是兽医。", "今天去爬山了。", "周末做了拉面。"];
        assert_eq!(about(&["小雨"], &texts), [true, true, false, false]);
        assert_eq!(Aliases::of(&[key("小雨")], &texts).roles(), ["姐姐"]);
    }
}
