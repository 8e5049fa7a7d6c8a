//! A user's entities, resolved from the events that name them: one entity per name (by
//! [`key`]), a role stated beside a name made its alias ("my sister Wen" → Wen, alias sister) so
//! that a later "my sister" is Wen too, a role named before the name joins it once the name is
//! given, and a short form that only one person's name starts with ("Mel") that person's alias.
//! Speakers of the turns are people of the events they speak in.

use super::{Kind, Mention, key, mentions};
use crate::model::{Event, Millis, Role, original_message_turns};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Speaker names that name a part, not a person ("助手": a Chinese chat's assistant).
const GENERIC_SPEAKERS: &[&str] =
    &["assistant", "ai", "bot", "chatbot", "system", "tool", "助手", "小助手", "ai助手", "智能助手", "客服", "机器人"];

/// An entity of one user's memory.
#[derive(Clone, Debug, PartialEq)]
pub struct Entity {
    /// Stable while the entity keeps its name: `ent_` and a hash of the user and the name's key.
    pub entity_id: String,
    pub name: String,
    pub kind: Kind,
    /// Other names and roles it goes by, sorted.
    pub aliases: Vec<String>,
    /// The events that name it, newest first.
    pub event_ids: Vec<String>,
    /// The times of its first and last event.
    pub first_seen: Millis,
    pub last_seen: Millis,
}

impl Entity {
    /// Whether `name` is this entity: its id, its name or one of its aliases (by [`key`]).
    pub fn is(&self, name: &str) -> bool {
        let k = key(name);
        self.entity_id == name || key(&self.name) == k || self.aliases.iter().any(|a| key(a) == k)
    }
}

/// The id of a user's entity of this name.
pub fn entity_id(user_id: &str, name: &str) -> String {
    let mut h = Sha256::new();
    h.update(user_id.as_bytes());
    h.update([0]);
    h.update(key(name).as_bytes());
    let d = h.finalize();
    format!("ent_{}", d[..8].iter().map(|b| format!("{b:02x}")).collect::<String>())
}

/// The entities an event names: in its text and in each of its turns, and its turns' speakers.
pub fn event_mentions(e: &Event) -> Vec<Mention> {
    let mut texts = vec![crate::model::event_text(&e.memory_info)];
    let mut speakers: Vec<String> = Vec::new();
    if let Some(serde_json::Value::String(raw)) = e.memory_info.get("original_messages")
        && let Some(turns) = original_message_turns(raw)
    {
        for (name, _, content) in turns {
            // A named speaker, whatever the role (a two-person chat writes one as the
            // assistant); an unnamed one is written by its role and is no entity.
            let is_name =
                !name.is_empty() && Role::parse(name).is_none() && !GENERIC_SPEAKERS.contains(&key(name).as_str());
            if is_name && !speakers.iter().any(|s| s == name) {
                speakers.push(name.to_string());
            }
            texts.push(content.to_string());
        }
    }
    let refs: Vec<&str> = speakers.iter().map(String::as_str).collect();
    // What the extractor stated first (its kinds and aliases), then the speakers, then what the
    // rules find in the text that neither named.
    let mut out = stated(e);
    for s in &speakers {
        if !out.iter().any(|o| key(&o.name) == key(s)) {
            out.push(Mention { name: s.clone(), kind: Kind::Person, role: None, named: true });
        }
    }
    for t in &texts {
        for m in mentions(t, &refs) {
            let known = |o: &Mention| {
                (o.named == m.named && key(&o.name) == key(&m.name))
                    || (m.named && o.role.as_deref().is_some_and(|r| key(r) == key(&m.name)))
            };
            if !out.iter().any(known) {
                out.push(m);
            }
        }
    }
    out
}

/// The entities an extractor stated for the event (`memory_info.entities`, the `llm`
/// extractor's): one mention per alias (an alias is kept as a role is), kinds it does not know
/// read as `other`.
fn stated(e: &Event) -> Vec<Mention> {
    let Some(serde_json::Value::Array(list)) = e.memory_info.get(crate::model::STATED_ENTITIES) else {
        return Vec::new();
    };
    let mut out: Vec<Mention> = Vec::new();
    for item in list {
        let Some(name) = item["name"].as_str().map(str::trim).filter(|n| !n.is_empty()) else { continue };
        let kind = item["kind"].as_str().and_then(Kind::parse).unwrap_or(Kind::Other);
        let aliases: Vec<String> = item["aliases"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|a| a.as_str().map(str::trim))
            .filter(|a| !a.is_empty() && key(a) != key(name))
            .map(str::to_string)
            .collect();
        let roles = if aliases.is_empty() { vec![None] } else { aliases.into_iter().map(Some).collect() };
        for role in roles {
            out.push(Mention { name: name.to_string(), kind, role, named: true });
        }
    }
    out
}

/// Every entity `user_id`'s events name, most events first (then by name).
pub fn catalog(user_id: &str, events: &[Event]) -> Vec<Entity> {
    struct Acc {
        name: String,
        kinds: BTreeMap<Kind, usize>,
        aliases: BTreeSet<String>,
        events: BTreeSet<usize>,
    }
    let mut named: BTreeMap<String, Acc> = BTreeMap::new();
    // Role-only mentions: role → the events that name someone by it.
    let mut by_role: BTreeMap<String, (Kind, BTreeSet<usize>)> = BTreeMap::new();
    for (i, e) in events.iter().enumerate() {
        for m in event_mentions(e) {
            if !m.named {
                by_role.entry(m.name.clone()).or_insert((m.kind, BTreeSet::new())).1.insert(i);
                continue;
            }
            let acc = named.entry(key(&m.name)).or_insert_with(|| Acc {
                name: m.name.clone(),
                kinds: BTreeMap::new(),
                aliases: BTreeSet::new(),
                events: BTreeSet::new(),
            });
            *acc.kinds.entry(m.kind).or_default() += 1;
            acc.aliases.extend(m.role);
            acc.events.insert(i);
        }
    }
    // A short form that exactly one person's name starts with is that person ("Mel" → Melanie).
    let people: Vec<String> = named
        .iter()
        .filter(|(_, a)| a.kinds.contains_key(&Kind::Person) || !a.aliases.is_empty())
        .map(|(k, _)| k.clone())
        .collect();
    let shorts: Vec<(String, String)> = named
        .keys()
        .filter(|k| k.chars().count() >= 3 && !k.contains(' '))
        .filter_map(|k| {
            let longer: Vec<&String> =
                people.iter().filter(|p| p.len() > k.len() && p.starts_with(k.as_str())).collect();
            (longer.len() == 1).then(|| (k.clone(), longer[0].clone()))
        })
        .collect();
    for (short, long) in shorts {
        if let Some(s) = named.remove(&short) {
            let l = named.get_mut(&long).expect("the longer name");
            l.aliases.insert(s.name);
            l.events.extend(s.events);
            for (k, n) in s.kinds {
                *l.kinds.entry(k).or_default() += n;
            }
        }
    }
    // A name that is exactly one other entity's alias ("小雨", stated as Wen's) is that entity.
    let aliased: Vec<(String, String)> = named
        .keys()
        .filter_map(|k| {
            let holders: Vec<&String> = named
                .iter()
                .filter(|(o, a)| *o != k && a.aliases.iter().any(|x| key(x) == *k))
                .map(|(o, _)| o)
                .collect();
            (holders.len() == 1).then(|| (k.clone(), holders[0].clone()))
        })
        .collect();
    for (alias, holder) in aliased {
        if named.contains_key(&holder)
            && let Some(a) = named.remove(&alias)
        {
            let h = named.get_mut(&holder).expect("the holder");
            h.events.extend(a.events);
            for (k, n) in a.kinds {
                *h.kinds.entry(k).or_default() += n;
            }
        }
    }
    // A role named alone is the one entity that holds it as an alias, else an entity of its own.
    for (role, (kind, evs)) in by_role {
        let holders: Vec<String> =
            named.iter().filter(|(_, a)| a.aliases.contains(&role)).map(|(k, _)| k.clone()).collect();
        match holders.as_slice() {
            [one] => named.get_mut(one).expect("holder").events.extend(evs),
            [] => {
                let acc = named.entry(role.clone()).or_insert_with(|| Acc {
                    name: role.clone(),
                    kinds: BTreeMap::new(),
                    aliases: BTreeSet::new(),
                    events: BTreeSet::new(),
                });
                *acc.kinds.entry(kind).or_default() += evs.len();
                acc.events.extend(evs);
            }
            // Two sisters by name: "my sister" alone could be either.
            _ => {}
        }
    }
    let mut out: Vec<Entity> = named
        .into_values()
        .map(|a| {
            // The specific kind most mentions give, when at least a third of them do ("into
            // Harry Potter" once among many plain mentions is no place).
            let total: usize = a.kinds.values().sum();
            let kind = a
                .kinds
                .iter()
                .filter(|(k, n)| **k != Kind::Other && **n * 3 >= total)
                .max_by_key(|(k, n)| (**n, std::cmp::Reverse(**k)))
                .map_or(Kind::Other, |(k, _)| *k);
            let mut evs: Vec<&Event> = a.events.iter().map(|i| &events[*i]).collect();
            evs.sort_by(|x, y| y.time.cmp(&x.time).then(y.id.cmp(&x.id)));
            let name_key = key(&a.name);
            Entity {
                entity_id: entity_id(user_id, &a.name),
                kind,
                aliases: a.aliases.into_iter().filter(|x| key(x) != name_key).collect(),
                first_seen: evs.iter().map(|e| e.time).min().unwrap_or_default(),
                last_seen: evs.iter().map(|e| e.time).max().unwrap_or_default(),
                event_ids: evs.iter().map(|e| e.id.clone()).collect(),
                name: a.name,
            }
        })
        .collect();
    out.sort_by(|a, b| b.event_ids.len().cmp(&a.event_ids.len()).then(a.name.cmp(&b.name)));
    out
}

/// Per entity key or alias key, the entities it names (for a question's names).
pub fn by_name(entities: &[Entity]) -> HashMap<String, Vec<usize>> {
    let mut out: HashMap<String, Vec<usize>> = HashMap::new();
    for (i, e) in entities.iter().enumerate() {
        for n in std::iter::once(&e.name).chain(&e.aliases) {
            let list = out.entry(key(n)).or_default();
            if !list.contains(&i) {
                list.push(i);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::original_message_line;

    fn event(id: &str, time: Millis, turns: &[(&str, &str)]) -> Event {
        let raw: Vec<String> = turns
            .iter()
            .map(|(who, text)| match *who {
                "assistant" => original_message_line(None, Role::Assistant, text),
                name => original_message_line(Some(name), Role::User, text),
            })
            .collect();
        let mut memory_info = serde_json::Map::new();
        memory_info.insert("summary".into(), turns[0].1.into());
        memory_info.insert("original_messages".into(), raw.join("\n").into());
        Event { id: id.into(), time, memory_info, ..Default::default() }
    }

    #[test]
    fn a_users_entities_with_roles_aliases_and_short_forms() {
        let events = vec![
            event("e1", 1, &[("Maya", "My sister is visiting next week."), ("assistant", "How nice!")]),
            event("e2", 2, &[("Maya", "My sister Ingrid got promoted at Banfield Hospital.")]),
            event("e3", 3, &[("Maya", "We took my dog Biscuit to the coast.")]),
            event("e4", 4, &[("Maya", "Ingrid's flight was late."), ("Melanie", "Hi Maya!")]),
            event("e5", 5, &[("Caroline", "Hey Mel! How was the trip?")]),
            event("e6", 6, &[("Caroline", "Woah Melanie, I moved to Melanie's street!")]),
            event("e7", 7, &[("助手", "好的，记住了。")]),
        ];
        let cat = catalog("u1", &events);
        let get = |name: &str| cat.iter().find(|e| e.is(name)).unwrap_or_else(|| panic!("{name} in {cat:#?}"));
        let ingrid = get("Ingrid");
        assert_eq!((ingrid.kind, ingrid.aliases.clone()), (Kind::Person, vec!["sister".to_string()]));
        assert_eq!(ingrid.event_ids, vec!["e4", "e2", "e1"], "the role named before the name joins it");
        assert_eq!((ingrid.first_seen, ingrid.last_seen), (1, 4));
        assert!(get("sister").entity_id == ingrid.entity_id && get("ingrid's").entity_id == ingrid.entity_id);
        assert_eq!(get("Biscuit").kind, Kind::Pet);
        assert_eq!(get("Banfield Hospital").kind, Kind::Organization);
        let mel = get("Melanie");
        assert_eq!(
            (mel.kind, mel.aliases.clone(), mel.event_ids.clone()),
            (Kind::Person, vec!["Mel".to_string()], vec!["e6".into(), "e5".into(), "e4".into()]),
            "a speaker is a person however a text names her"
        );
        assert!(!cat.iter().any(|e| e.name.starts_with("Woah")), "an interjection opening a sentence is no name");
        assert_eq!(get("Maya").event_ids.len(), 4, "a speaker is in the events she speaks in (and is named in)");
        assert_eq!(cat[0].name, "Maya", "most events first");
        assert_eq!(ingrid.entity_id, entity_id("u1", "ingrid"), "stable: the user and the name");
        assert_ne!(ingrid.entity_id, entity_id("u2", "Ingrid"));
        assert!(!cat.iter().any(|e| e.is("assistant") || e.is("助手")), "the assistant is not an entity");
    }

    #[test]
    fn entities_an_extractor_stated_with_their_kinds_and_aliases() {
        let mut e1 = event("e1", 1, &[("user", "My sister is coming over; we'll try the new Kindle together.")]);
        e1.memory_info.insert(
            crate::model::STATED_ENTITIES.into(),
            serde_json::json!([
                {"name": "Wen", "kind": "person", "aliases": ["my sister", "Xiaoyu"]},
                {"name": "Kindle", "kind": "product", "aliases": []},
            ]),
        );
        // Later, named only by the alias, in an event no extractor annotated.
        let e2 = event("e2", 2, &[("user", "Yesterday I met Xiaoyu at the station.")]);
        let cat = catalog("u1", &[e1, e2]);
        let wen = cat.iter().find(|e| e.is("Wen")).unwrap_or_else(|| panic!("{cat:#?}"));
        assert_eq!(wen.kind, Kind::Person);
        assert_eq!(wen.aliases, vec!["Xiaoyu".to_string(), "my sister".to_string()]);
        assert_eq!(wen.event_ids, vec!["e2", "e1"], "the alias named alone is Wen");
        assert!(!cat.iter().any(|e| e.name == "Xiaoyu"), "no second entity for the alias: {cat:#?}");
        let kindle = cat.iter().find(|e| e.is("kindle")).unwrap();
        assert_eq!(kindle.kind, Kind::Other, "a kind the catalog does not know reads as other");
    }
}
