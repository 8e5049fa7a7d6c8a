//! Entities: the people, places, organisations and pets a text names, found by rules (no LLM) —
//! English proper names (capitalised words; a sentence's first word only when it reads as a
//! name), their kind from the words around them ("my sister Wen", "my dog Max", "in Munich",
//! "Acme Corp"), and Chinese names by jieba's part-of-speech tags (nr person, ns place, nt
//! organisation). Names are compared by [`key`]: case, possessives and spacing folded.
//!
//! Also what a question asks of them: [`Question::of`] reads the names a question is about and
//! whether it asks for a list or a summary ("what foods does N like", "which", "all", "how
//! often", 哪些, 都) — evidence that sits in many sessions, not in the one nearest turn.

use std::sync::LazyLock;

mod catalog;
mod lift;
pub use catalog::*;
pub use lift::Aliases;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    Person,
    Place,
    Organization,
    Pet,
    Other,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Person => "person",
            Kind::Place => "place",
            Kind::Organization => "organization",
            Kind::Pet => "pet",
            Kind::Other => "other",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "person" => Kind::Person,
            "place" => Kind::Place,
            "organization" => Kind::Organization,
            "pet" => Kind::Pet,
            "other" => Kind::Other,
            _ => return None,
        })
    }
}

/// A name as a text gives it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mention {
    /// As written, possessive dropped ("Melanie" from "Melanie's").
    pub name: String,
    pub kind: Kind,
    /// The role the text gives it, as an alias: "sister" in "my sister Wen", 姐姐 in 我姐姐小雨.
    pub role: Option<String>,
    /// `false`: named by its role alone ("my sister", no name) — `name` is the role.
    pub named: bool,
}

/// The form names are compared by: lowercased, possessive dropped, inner spacing single.
pub fn key(name: &str) -> String {
    let t = name.trim().trim_matches(|c: char| !c.is_alphanumeric());
    let t = t.strip_suffix("'s").or_else(|| t.strip_suffix("’s")).unwrap_or(t);
    let t = t.strip_suffix('\'').or_else(|| t.strip_suffix('’')).unwrap_or(t);
    t.split_whitespace().collect::<Vec<_>>().join(" ").to_lowercase()
}

/// Every entity the text names, in order of first mention, each once (by [`key`]); `speakers`
/// (the names of the conversation's speakers) are people wherever they appear.
pub fn mentions(text: &str, speakers: &[&str]) -> Vec<Mention> {
    let mut found: Vec<Mention> = Vec::new();
    let mut push = |m: Mention| {
        let k = key(&m.name);
        if k.is_empty() {
            return;
        }
        match found.iter_mut().find(|f| key(&f.name) == k && f.named == m.named) {
            Some(f) => {
                if f.kind == Kind::Other {
                    f.kind = m.kind;
                }
                if f.role.is_none() {
                    f.role = m.role;
                }
            }
            None => found.push(m),
        }
    };
    let speaker_keys: Vec<String> = speakers.iter().map(|s| key(s)).filter(|k| !k.is_empty()).collect();
    for m in english(text, &speaker_keys) {
        push(m);
    }
    if text.chars().any(cjk) {
        for m in chinese(text) {
            push(m);
        }
    }
    found
}

fn cjk(c: char) -> bool {
    matches!(c as u32, 0x4E00..=0x9FFF | 0x3400..=0x4DBF)
}

/// A word of the text with what precedes it.
struct Word<'a> {
    text: &'a str,
    /// The first word of a sentence (or of the text).
    opens: bool,
}

fn words(text: &str) -> Vec<Word<'_>> {
    let mut out = Vec::new();
    let mut opens = true;
    let mut start = None;
    for (i, c) in text.char_indices() {
        // A Chinese character is no part of an English word: "NT一点二" is "NT", then Chinese
        // (which jieba reads).
        let part =
            (c.is_alphanumeric() && !crate::text::is_han(c)) || c == '\'' || c == '’' || (c == '-' && start.is_some());
        match (part, start) {
            (true, None) => start = Some(i),
            (false, Some(s)) => {
                out.push(Word { text: &text[s..i], opens });
                opens = false;
                start = None;
            }
            _ => {}
        }
        if !part && matches!(c, '.' | '!' | '?' | '\n' | ':' | ';' | '"' | '“' | '”' | '(' | '。' | '！' | '？')
        {
            opens = true;
        }
    }
    if let Some(s) = start {
        out.push(Word { text: &text[s..], opens });
    }
    out
}

fn capitalised(w: &str) -> bool {
    let mut cs = w.chars();
    cs.next().is_some_and(|c| c.is_uppercase()) && cs.any(|c| c.is_lowercase() || c.is_uppercase())
}

/// Capitalised words that are not names (sentence openers, pronouns, days, months, titles of
/// address), lowercased.
static NOT_NAMES: LazyLock<std::collections::HashSet<&'static str>> = LazyLock::new(|| {
    "i i'm i've i'd i'll im a an the this that these those there then than it it's its he she we they you \
     me my mine our your his her their them us what which who whom whose how when where why yes no not \
     ok okay oh wow hey hi hello thanks thank sure well so and but or if also just really yeah yep nope \
     great good nice awesome cool amazing congrats congratulations sorry please sounds glad haha lol \
     definitely absolutely totally anyway btw omg aw aww by for from in on at of to with as after before \
     since until during today tonight tomorrow yesterday last next every each all some any many much \
     most more one two three four five six seven eight nine ten first second do does did have has had \
     was were is are be been can could would should will shall may might must let let's here let’s \
     monday tuesday wednesday thursday friday saturday sunday january february march april may june \
     july august september october november december mr mrs ms dr mom mum dad mama papa grandma grandpa \
     god lord christmas easter halloween thanksgiving english chinese spanish french german lgbtq lgbt \
     tv ai covid usa uk eu nyc ps dm ceo im not nothing something everything everyone someone anyone \
     always never often sometimes maybe perhaps still yet though although because while once again \
     love loved like liked miss missed hope wish keep take make made go going went got get see saw \
     look looks looking check remember tell told say said know knew think thought feel felt want \
     wanted need needed try tried welcome bye goodbye cheers best regards true right exactly indeed \
     speaking talking"
        .split_whitespace()
        .collect()
});

/// Words a multi-word name opens with, kept at a sentence's start ("New York is …").
const NAME_OPENERS: &[&str] = &[
    "new", "san", "santa", "los", "las", "st", "saint", "mount", "mt", "lake", "north", "south", "east", "west",
    "fort", "port", "el", "la", "le", "van", "de", "du", "great", "upper", "lower", "central",
];

/// Words that open a name's kind when right before it: "my sister Wen", "our dog Max".
const PERSON_ROLES: &[&str] = &[
    "sister",
    "brother",
    "mom",
    "mother",
    "dad",
    "father",
    "friend",
    "husband",
    "wife",
    "boyfriend",
    "girlfriend",
    "partner",
    "son",
    "daughter",
    "boss",
    "coworker",
    "colleague",
    "neighbor",
    "neighbour",
    "cousin",
    "aunt",
    "uncle",
    "grandma",
    "grandmother",
    "grandpa",
    "grandfather",
    "niece",
    "nephew",
    "roommate",
    "granddaughter",
    "grandson",
    "grandchild",
    "grandkid",
    "teacher",
    "coach",
    "mentor",
    "fiance",
    "fiancé",
    "fiancee",
    "fiancée",
    "therapist",
    "doctor",
    "manager",
    "kid",
    "child",
    "baby",
    "bestie",
    "buddy",
    "pal",
    "classmate",
    "student",
    "client",
];
const PET_ROLES: &[&str] = &[
    "dog", "cat", "puppy", "kitten", "pup", "pet", "turtle", "tortoise", "bird", "parrot", "hamster", "rabbit",
    "bunny", "horse", "fish", "snake", "lizard", "guinea", "pony",
];
const PLACE_BEFORE: &[&str] =
    &["in", "to", "from", "near", "visit", "visited", "visiting", "moved", "move", "moving", "around", "across"];
const ORG_WORDS: &[&str] = &[
    "inc",
    "corp",
    "corporation",
    "company",
    "co",
    "ltd",
    "llc",
    "university",
    "college",
    "school",
    "academy",
    "hospital",
    "clinic",
    "bank",
    "group",
    "studio",
    "studios",
    "foundation",
    "institute",
    "center",
    "centre",
    "club",
    "church",
    "association",
    "society",
    "agency",
    "labs",
    "lab",
    "records",
    "press",
    "team",
    "league",
];
const PLACE_WORDS: &[&str] = &[
    "city",
    "park",
    "lake",
    "river",
    "mountain",
    "mountains",
    "beach",
    "island",
    "street",
    "avenue",
    "valley",
    "county",
    "state",
    "bay",
    "canyon",
    "falls",
    "national",
];

fn english(text: &str, speakers: &[String]) -> Vec<Mention> {
    let ws = words(text);
    let mut out = Vec::new();
    let mut i = 0;
    while i < ws.len() {
        let w = &ws[i];
        let lower = key(w.text);
        // "my sister" with no name after it: the person by role alone.
        let owned = i > 0 && matches!(key(ws[i - 1].text).as_str(), "my" | "our");
        let unnamed = ws.get(i + 1).is_none_or(|n| n.opens || !capitalised(n.text));
        if owned && unnamed && !capitalised(w.text) {
            let kind = if PERSON_ROLES.contains(&lower.as_str()) {
                Some(Kind::Person)
            } else if PET_ROLES.contains(&lower.as_str()) {
                Some(Kind::Pet)
            } else {
                None
            };
            if let Some(kind) = kind {
                out.push(Mention { name: lower.clone(), kind, role: Some(lower.clone()), named: false });
            }
        }
        let speaker = speakers.contains(&lower);
        if !capitalised(w.text) || (NOT_NAMES.contains(lower.as_str()) && !speaker) {
            i += 1;
            continue;
        }
        // Consecutive capitalised words are one name ("New York", "Acme Corp"); a possessive
        // ends it ("Melanie's kids").
        let mut j = i + 1;
        while j < ws.len()
            && !ws[j].opens
            && capitalised(ws[j].text)
            && !NOT_NAMES.contains(key(ws[j].text).as_str())
            && !ws[j - 1].text.ends_with("'s")
            && !ws[j - 1].text.ends_with("’s")
        {
            j += 1;
        }
        // A sentence's first word is a name only when it is a speaker's, part of a longer name,
        // or followed by a possessive or a verb-like word that names rarely open: kept only when
        // the text also writes it capitalised mid-sentence.
        let mid_sentence_elsewhere =
            || ws.iter().any(|o| !o.opens && key(o.text) == lower && capitalised(o.text)) || speakers.contains(&lower);
        // "Fiona, my wife, found…": a role in apposition makes the words before it a name, even
        // at a sentence's start.
        let end = ws[j - 1].text.as_ptr() as usize - text.as_ptr() as usize + ws[j - 1].text.len();
        let window: String = text[end..].chars().take(48).collect::<String>().to_lowercase();
        let appositive = lift::role_after(&window).map(str::to_string);
        if w.opens && !speaker && appositive.is_none() && !mid_sentence_elsewhere() && !w.text.ends_with("'s") {
            // "Woah Jon", "Agreed John": the opener is no part of the name after it ("New York"
            // at a sentence's start keeps its first word).
            if j == i + 1 || !NAME_OPENERS.contains(&lower.as_str()) {
                i += 1;
                continue;
            }
        }
        let name = ws[i..j].iter().map(|w| w.text).collect::<Vec<_>>().join(" ");
        let name = name.strip_suffix("'s").or_else(|| name.strip_suffix("’s")).unwrap_or(&name).to_string();
        let before = |k: usize| (i >= k).then(|| key(ws[i - k].text));
        let last = key(ws[j - 1].text);
        let prev = before(1).unwrap_or_default();
        let owner = before(2).is_some_and(|o| matches!(o.as_str(), "my" | "our" | "his" | "her" | "their" | "your"));
        let (kind, role) = if owner && PET_ROLES.contains(&prev.as_str()) {
            (Kind::Pet, Some(prev))
        } else if owner && PERSON_ROLES.contains(&prev.as_str()) {
            (Kind::Person, Some(prev))
        } else if let Some(role) = appositive {
            let kind = if PET_ROLES.contains(&role.as_str()) { Kind::Pet } else { Kind::Person };
            (kind, Some(role))
        } else if speaker {
            (Kind::Person, None)
        } else if ORG_WORDS.contains(&last.as_str()) {
            (Kind::Organization, None)
        } else if PLACE_WORDS.contains(&last.as_str()) || PLACE_BEFORE.contains(&prev.as_str()) {
            (Kind::Place, None)
        } else if prev == "at" || prev == "for" {
            (Kind::Organization, None)
        } else {
            (Kind::Other, None)
        };
        out.push(Mention { name, kind, role, named: true });
        i = j;
    }
    out
}

/// Chinese kinship words that name a person by role (我姐姐小雨: 小雨, role 姐姐).
pub(crate) const ZH_ROLES: &[&str] = &[
    "姐姐",
    "妹妹",
    "哥哥",
    "弟弟",
    "妈妈",
    "爸爸",
    "老公",
    "老婆",
    "丈夫",
    "妻子",
    "儿子",
    "女儿",
    "朋友",
    "同事",
    "老板",
    "领导",
    "男朋友",
    "女朋友",
    "对象",
    "婆婆",
    "公公",
    "奶奶",
    "爷爷",
    "外婆",
    "外公",
    "老师",
    "邻居",
];

fn chinese(text: &str) -> Vec<Mention> {
    let tags = crate::text::tag(text);
    let mut out = Vec::new();
    for (k, (word, tag)) in tags.iter().enumerate() {
        let kind = match tag.as_str() {
            "nr" | "nrfg" | "nrt" => Kind::Person,
            "ns" => Kind::Place,
            "nt" => Kind::Organization,
            _ => continue,
        };
        if word.chars().count() < 2 {
            continue;
        }
        let role = (k > 0 && kind == Kind::Person)
            .then(|| tags[k - 1].0.as_str())
            .filter(|p| ZH_ROLES.contains(p))
            .map(str::to_string);
        out.push(Mention { name: word.clone(), kind, role, named: true });
    }
    out
}

/// Whether an alias is a role ("sister", "dog", 姐姐) rather than a name: a role names whoever
/// holds it, so it identifies an entity only where the text ties it to the name.
pub fn is_role(alias: &str) -> bool {
    let k = key(alias);
    let k = k.strip_prefix("my ").unwrap_or(&k);
    PERSON_ROLES.contains(&k) || PET_ROLES.contains(&k) || ZH_ROLES.contains(&k)
}

/// What a question asks about entities.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Question {
    /// The names it is about, by [`key`].
    pub names: Vec<String>,
    /// It asks for several things gathered over time (a list, a count, a summary), not one fact.
    pub list: bool,
}

impl Question {
    pub fn of(query: &str, speakers: &[&str]) -> Self {
        let names: Vec<String> =
            mentions(query, speakers).into_iter().filter(|m| m.named).map(|m| key(&m.name)).collect();
        Self { names, list: asks_for_list(query) }
    }
}

/// Whether a question asks for a list, a count or a summary: "what activities does N do",
/// "which books", "all", "how many times", "how often", "what kind of", 哪些, 都, 几次.
pub fn asks_for_list(query: &str) -> bool {
    let lower = query.to_lowercase();
    let ws: Vec<String> = words(&lower).iter().map(|w| w.text.to_string()).collect();
    let has = |w: &str| ws.iter().any(|x| x == w);
    let phrase = |p: &[&str]| ws.windows(p.len()).any(|win| win.iter().zip(p).all(|(a, b)| a == b));
    if ["哪些", "都有", "都做", "都去", "都买", "几次", "多少次", "有什么爱好", "都喜欢"]
        .iter()
        .any(|p| query.contains(p))
    {
        return true;
    }
    if has("all") || has("which") || has("both") || phrase(&["how", "often"]) || phrase(&["how", "many"]) {
        return true;
    }
    if phrase(&["what", "kind"])
        || phrase(&["what", "kinds"])
        || phrase(&["what", "types"])
        || phrase(&["what", "type"])
    {
        return true;
    }
    // "What activities …", "What books has …": a plural noun right after "what", then an
    // auxiliary ("do/does/did/has/have/are/were").
    if let Some(at) = ws.iter().position(|w| w == "what") {
        let next = ws.get(at + 1).map(String::as_str).unwrap_or_default();
        let then = ws.get(at + 2).map(String::as_str).unwrap_or_default();
        let aux = matches!(then, "do" | "does" | "did" | "has" | "have" | "had" | "are" | "were" | "is" | "was");
        let plural = next.len() > 3 && next.ends_with('s') && !next.ends_with("ss") && !next.ends_with("us");
        if plural && aux {
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(text: &str, speakers: &[&str]) -> Vec<(String, &'static str, Option<String>)> {
        mentions(text, speakers).into_iter().filter(|m| m.named).map(|m| (m.name, m.kind.as_str(), m.role)).collect()
    }

    #[test]
    fn english_names_with_their_kinds() {
        assert_eq!(
            names("Yesterday my sister Wen flew in from Munich. We took my dog Max to Lake Tahoe.", &[]),
            vec![
                ("Wen".into(), "person", Some("sister".into())),
                ("Munich".into(), "place", None),
                ("Max".into(), "pet", Some("dog".into())),
                ("Lake Tahoe".into(), "place", None),
            ]
        );
        // A role in apposition, at a sentence's start too.
        assert_eq!(
            names("Fiona, my wife, found a supplier. Our dog, Max, hid.", &[]),
            vec![("Fiona".into(), "person", Some("wife".into())), ("Max".into(), "pet", Some("dog".into()))]
        );
        assert_eq!(
            names("We met Mel, my old climbing partner from Seattle.", &[]),
            vec![("Mel".into(), "person", Some("partner".into())), ("Seattle".into(), "place", None)]
        );
        assert_eq!(
            names("I started at Acme Corp last week; Priya's team is great.", &[]),
            vec![("Acme Corp".into(), "organization", None), ("Priya".into(), "other", None)]
        );
        // Sentence openers are not names unless a speaker's or written mid-sentence elsewhere.
        assert!(names("Going camping was fun. Thanks for asking!", &[]).is_empty());
        assert_eq!(names("Melanie, how are you?", &["Melanie"]), vec![("Melanie".into(), "person", None)]);
        assert_eq!(
            names("Jon went home. Later I saw Jon again.", &[]),
            vec![("Jon".into(), "other", None)],
            "one entry per name"
        );
        assert!(
            names("我的NT一点二在正常范围内，医生说Anna的报告也没问题", &[]).iter().all(|(n, _, _)| n.is_ascii()),
            "an English name ends where Chinese begins"
        );
    }

    #[test]
    fn keys_fold_case_and_possessives() {
        assert_eq!(key("Melanie's"), "melanie");
        assert_eq!(key("  New   York "), "new york");
        assert_eq!(key("James’"), "james");
    }

    #[test]
    fn chinese_names_by_tag() {
        let found = mentions("我姐姐王小雨下个月去北京出差。", &[]);
        assert!(found.iter().any(|m| m.kind == Kind::Place && m.name == "北京"), "{found:?}");
        assert!(found.iter().any(|m| m.kind == Kind::Person), "{found:?}");
    }

    #[test]
    fn list_questions() {
        for q in [
            "What activities does Melanie partake in?",
            "What books has Tim read?",
            "Which geographical locations has Tim been to?",
            "How many times has Melanie gone to the beach in 2023?",
            "What kind of art does Caroline make?",
            "王芳都买了哪些东西？",
            "What do Jon and Gina both have in common?",
        ] {
            assert!(asks_for_list(q), "{q}");
        }
        for q in [
            "When did Melanie paint a sunrise?",
            "What is Caroline's identity?",
            "Where does Nate live?",
            "朵朵后来换成了什么奶粉？",
        ] {
            assert!(!asks_for_list(q), "{q}");
        }
        let q = Question::of("What pets does Nate have?", &[]);
        assert_eq!(q, Question { names: vec!["nate".into()], list: true });
    }
}
