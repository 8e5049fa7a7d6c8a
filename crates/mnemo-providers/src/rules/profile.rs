//! The rules extractor's profile: first-person statements of the user, in Chinese and English,
//! as set / append / remove changes — facts ("I live in", 我叫), tastes ("I like", 我不喜欢), and
//! the changes that end an earlier value ("I moved to", "I quit my job", 我搬到了, 我们分手了).

use mnemo_core::extract::ProfileChange;
use regex::Regex;
use serde_json::Value;
use std::sync::LazyLock;

/// How a matched statement changes the profile.
#[derive(Clone, Copy)]
enum Op {
    Set(&'static str),
    /// Append to the first list, remove the same item from the second.
    Append(&'static str, Option<&'static str>),
    /// The statement ends the attribute ("I quit my job", 我们分手了); what it captures is unused.
    Unset(&'static str),
}

/// Chinese clause end: punctuation, a conjunction-ish break, or the end.
const ZH_END: &str = r"(?:[，。！？,.!?；;、\n]|而且|但是|所以|$)";
const EN_END: &str = r"(?:[,.!?;\n]| and | but | because |$)";
/// The user as the subject of a Chinese statement: "我", or a first clause of the user's own
/// ("我住在上海，") whose subject the next clause shares ("…，对花生过敏").
const ZH_I: &str = r"(?:我|我(?:现在|目前|也|还|今年)?(?:住在|生活在|是|叫|在|今年|喜欢|爱|不喜欢)[^。！？!?；;\n，,]{0,20}[，,]\s*(?:也|还|而且)?)";

static RULES: LazyLock<Vec<(Regex, Op)>> = LazyLock::new(|| {
    let zh = |p: &str| Regex::new(&format!("{p}{ZH_END}")).unwrap();
    let en = |p: &str| Regex::new(&format!("(?i){p}{EN_END}")).unwrap();
    vec![
        (zh(r"我叫([^，。！？,.!?；;\s]{1,12}?)"), Op::Set("name")),
        (zh(r"我的名字是([^，。！？,.!?；;\s]{1,12}?)"), Op::Set("name")),
        (zh(r"我今年(\d{1,3}岁)"), Op::Set("age")),
        (zh(r"我(?:们|家)?(?:现在|目前)?(?:住在|生活在|定居在?)([^，。！？,.!?；;\s]{1,16}?)"), Op::Set("city")),
        (
            zh(
                r"(?:我家|我的|我们家)?(?:宝宝|孩子|儿子|女儿|小孩|闺女)(?:今年|现在|已经|刚)?(?:满)?(\d{1,2}(?:岁半?|个月))",
            ),
            Op::Set("child_age"),
        ),
        (zh(r"我(?:现在|目前)?在([^，。！？,.!?；;\s]{1,16}?)(?:工作|上班)"), Op::Set("workplace")),
        (zh(r"我是一[名个位]([^，。！？,.!?；;\s]{1,16}?)"), Op::Set("occupation")),
        (zh(r"我是(?:个)?([^一，。！？,.!?；;\s][^，。！？,.!?；;\s]{0,15}?)"), Op::Append("identity", None)),
        (
            zh(&format!(r"{ZH_I}(?:很|最|特别|非常|比较|超)?(?:喜欢|爱吃|爱喝|热爱)([^，。！？,.!?；;]{{1,20}}?)")),
            Op::Append("likes", Some("dislikes")),
        ),
        (
            zh(&format!(r"{ZH_I}(?:不喜欢|不爱|讨厌|受不了)([^，。！？,.!?；;]{{1,20}}?)")),
            Op::Append("dislikes", Some("likes")),
        ),
        (zh(r"我(?:更)?(?:偏好|倾向于?|更喜欢|习惯)([^，。！？,.!?；;]{1,20}?)"), Op::Append("prefers", None)),
        (zh(&format!(r"{ZH_I}对([^，。！？,.!?；;\s]{{1,12}}?)过敏")), Op::Append("allergies", None)),
        (zh(r"我(?:是|只)?(吃素|素食者?|纯素)"), Op::Set("diet")),
        // Changes: a move, a new job, a job or a relationship ended, a new partner or pet.
        (
            zh(r"我(?:们|家)?(?:已经|刚|最近|上个月|去年)?(?:搬家|搬)(?:到|去)了?([^，。！？,.!?；;\s了]{1,16}?)了?"),
            Op::Set("city"),
        ),
        (
            zh(
                r"我(?:已经|刚|最近)?(?:跳槽|入职|换工作|调)(?:到|去|进)了?([^，。！？,.!?；;\s了]{1,16}?)(?:工作|上班)?了?",
            ),
            Op::Set("workplace"),
        ),
        (zh(r"我(?:已经|刚|最近)?(辞职|离职|被裁|退休)了?"), Op::Unset("workplace")),
        (zh(r"我(?:和[^，。！？,.!?；;\s]{1,8})?(?:们)?(?:已经|刚)?(分手|离婚)了?"), Op::Unset("partner")),
        (
            zh(
                r"我的?(?:新)?(?:男朋友|女朋友|男友|女友|老公|老婆|丈夫|妻子|对象|未婚夫|未婚妻)(?:叫|是)([^，。！？,.!?；;\s]{1,8}?)",
            ),
            Op::Set("partner"),
        ),
        (
            zh(r"我(?:家)?(?:新|刚|最近)?(?:养了|领养了|收养了)(?:一只|一条|只|条)([^，。！？,.!?；;\s]{1,10}?)"),
            Op::Append("pets", None),
        ),
        (en(r"\bmy name is ([A-Za-z][A-Za-z'-]*(?: [A-Z][A-Za-z'-]*)?)"), Op::Set("name")),
        (en(r"\bI(?: am|'m) (\d{1,3}) years? old"), Op::Set("age")),
        (en(r"\bI (?:currently |now )?live in ([A-Za-z][A-Za-z .'-]{1,30}?)"), Op::Set("city")),
        // "I live in Lisbon and work as a nurse": the subject is shared across "and".
        (
            en(r"\b(?:I|and) (?:currently |now )?work (?:at|for) ([A-Za-z0-9][A-Za-z0-9 &.'-]{1,30}?)"),
            Op::Set("workplace"),
        ),
        (en(r"\b(?:I|and) (?:currently |now )?work as (?:an? )?([A-Za-z][A-Za-z -]{1,30}?)"), Op::Set("occupation")),
        (en(r"\bI(?: am|'m) an? ([A-Za-z][A-Za-z -]{1,30}?)"), Op::Append("identity", None)),
        (
            en(r"\bI (?:really |also |just )?(?:like|love|enjoy|adore) ([^,.!?;\n]{1,40}?)"),
            Op::Append("likes", Some("dislikes")),
        ),
        (
            en(r"\bI (?:don't|do not|really don't) (?:like|enjoy) ([^,.!?;\n]{1,40}?)"),
            Op::Append("dislikes", Some("likes")),
        ),
        (en(r"\bI (?:hate|dislike|can't stand) ([^,.!?;\n]{1,40}?)"), Op::Append("dislikes", Some("likes"))),
        (en(r"\bI (?:usually |generally )?prefer ([^,.!?;\n]{1,40}?)"), Op::Append("prefers", None)),
        (en(r"\bI(?: am|'m) allergic to ([^,.!?;\n]{1,30}?)"), Op::Append("allergies", None)),
        (
            en(r"\bI(?: am|'m) (?:a |an )?(vegetarian|vegan|pescatarian|gluten-free|lactose intolerant)"),
            Op::Set("diet"),
        ),
        // Changes. A place or an employer starts with a capital ("moved to a new flat" is none).
        (
            en(
                r"\b(?:I|we)(?:'ve| have)? (?:just |recently |finally )?(?:moved|relocated) (?:back )?to ((?-i:[A-Z])[A-Za-z .'-]{1,30}?)",
            ),
            Op::Set("city"),
        ),
        (
            en(
                r"\bI(?:'ve| have)? (?:just |recently |finally )?(?:started (?:a new job |working |to work )?(?:at|for)|joined|got a (?:new )?job (?:at|with)) ((?-i:[A-Z])[A-Za-z0-9 &.'-]{1,30}?)",
            ),
            Op::Set("workplace"),
        ),
        (en(r"\bI(?:'ve| have)? (?:just |recently |finally )?(quit|left|lost) my job"), Op::Unset("workplace")),
        (en(r"\bI(?:'ve| have)? (?:just |recently |finally )?(retired)"), Op::Unset("workplace")),
        (en(r"\b(?:I|we)(?:'ve| have)? (?:just |recently )?(broke up|split up|got divorced)"), Op::Unset("partner")),
        (
            en(r"\bmy (?:new )?(?:boyfriend|girlfriend|partner|husband|wife|fianc[ée]e?),? ((?-i:[A-Z])[a-z]+)"),
            Op::Set("partner"),
        ),
        (
            en(
                r"\bI (?:just |recently |finally )?(?:got|adopted|rescued) (?:a|an|my first|another) (?:new )?((?:dog|cat|puppy|kitten|parrot|rabbit|bunny|hamster|turtle|horse)(?: named (?-i:[A-Z])[a-z]+)?)",
            ),
            Op::Append("pets", None),
        ),
    ]
});

/// A time said after a value ("moved to Munich last month", "since 2019") is no part of it.
static TRAILING_TIME: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\s+(?:(?:last|this|next|early|late)\s+(?:week|month|year|spring|summer|fall|autumn|winter)|yesterday|today|recently|lately|a while ago|(?:a|an|one|two|three|four|five|six|a few|a couple of|\d+)\s+(?:day|week|month|year)s?\s+ago|(?:in|since|back in)\s+\d{4}|since\s.*)$")
        .expect("trailing time")
});

pub(super) fn clean_value(v: &str) -> Option<String> {
    let v = v.trim().trim_end_matches(['了', '的', '啊', '呢', '吧', '呀', '哦']).trim();
    let v = TRAILING_TIME.find(v).map_or(v, |m| &v[..m.start()]);
    let v = v.strip_prefix("the ").unwrap_or(v);
    let v = [
        " anymore",
        " any more",
        " very much",
        " so much",
        " a lot",
        " too",
        " either",
        " now",
        " currently",
        " these days",
        " nowadays",
        " at the moment",
    ]
    .iter()
    .fold(v, |v, tail| v.strip_suffix(tail).unwrap_or(v))
    .trim();
    (!v.is_empty() && v.chars().count() <= 40).then(|| v.to_string())
}

/// Whether an English value says something about the user, not a reaction to the other side or
/// to what was just said: "I love your turtles", "I love it when you cook", "I love that you chose
/// pottery", "I love the idea", "I'm a huge fan of it", "I'm a part of…" are kept out of the
/// profile; "I love hiking", "I'm an expert hiker" stay. Chinese values are not judged here (their
/// patterns already require the user as the subject and stop at a clause end).
pub(super) fn about_the_user(key: &str, value: &str) -> bool {
    /// The other side, anywhere in the value.
    const YOU: &[&str] = &["you", "your", "yours", "you're", "you've"];
    /// Something said before, or a clause instead of a thing, leading the value.
    const POINTING: &[&str] = &[
        "it", "it's", "that", "this", "these", "those", "them", "they", "their", "his", "her", "its", "how", "when",
        "what", "where", "why", "who", "which", "makes", "made",
    ];
    /// "I love the idea / the thought / the color": a reaction, with no object of its own.
    const REACTIONS: &[&str] = &[
        "idea", "ideas", "thought", "thoughts", "color", "colour", "colors", "way", "feeling", "vibe", "vibes",
        "sound", "look", "energy", "fact", "support",
    ];
    /// "I'm a huge fan of it", "I'm a part of", "I'm a huge fan!": no identity without an object
    /// of its own.
    const POINTED_AT: &[&str] = &["it", "this", "that", "them", "these", "those"];
    const DANGLING: &[&str] = &["of", "in", "at", "for", "to", "with", "on", "fan", "part"];
    // As written: mid-sentence, a capital marks a name or a title ("IT consultant", "It's Always
    // Sunny"), never the pointing words above.
    let words: Vec<&str> =
        value.split(|c: char| !(c.is_alphanumeric() || c == '\'')).filter(|w| !w.is_empty()).collect();
    let (Some(first), Some(last)) = (words.first(), words.last()) else { return false };
    if !first.is_ascii() {
        return true;
    }
    if words.iter().any(|w| YOU.contains(w)) || POINTING.contains(first) {
        return false;
    }
    match key {
        "likes" | "dislikes" | "prefers" => !REACTIONS.contains(first),
        "identity" => !words.iter().any(|w| POINTED_AT.contains(w)) && !DANGLING.contains(last),
        _ => true,
    }
}

/// Profile changes from the user's own statements, in the order they were said.
pub fn profile_changes<'a>(user_texts: impl Iterator<Item = &'a str>) -> Vec<ProfileChange> {
    let mut found: Vec<(usize, usize, ProfileChange, Option<ProfileChange>)> = Vec::new();
    for (mi, text) in user_texts.enumerate() {
        for (re, op) in RULES.iter() {
            for cap in re.captures_iter(text) {
                let (Some(whole), Some(v)) = (cap.get(0), cap.get(1)) else {
                    continue;
                };
                if let Op::Unset(key) = *op {
                    found.push((mi, whole.start(), ProfileChange::Remove { key: key.into() }, None));
                    continue;
                }
                let Some(value) = clean_value(v.as_str()) else {
                    continue;
                };
                let key = match *op {
                    Op::Set(key) | Op::Append(key, _) | Op::Unset(key) => key,
                };
                if !about_the_user(key, &value) {
                    continue;
                }
                let (change, undo) = match *op {
                    Op::Set(key) => (ProfileChange::Set { key: key.into(), value: Value::String(value) }, None),
                    Op::Append(key, opposite) => (
                        ProfileChange::Append { key: key.into(), items: vec![value.clone()] },
                        opposite.map(|o| ProfileChange::RemoveItems { key: o.into(), items: vec![value] }),
                    ),
                    Op::Unset(_) => continue,
                };
                found.push((mi, whole.start(), change, undo));
            }
        }
    }
    // Statement order decides: a later "I don't like X" overrides an earlier "I like X".
    found.sort_by_key(|(mi, pos, _, _)| (*mi, *pos));
    let mut out = Vec::new();
    for (_, _, change, undo) in found {
        if let Some(u) = undo {
            out.push(u);
        }
        if !out.contains(&change) {
            out.push(change);
        }
    }
    out
}
