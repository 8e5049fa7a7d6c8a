//! Entities over HTTP: a user's people, places and pets resolved from what was extracted from
//! their conversations (speakers, "my sister" named later, a short form), listed, fetched with
//! their events, used as a search filter, and gone with the user.

use crate::harness::*;
use serde_json::{Value, json};

fn turns(pairs: &[(&str, &str, &str)]) -> Value {
    Value::Array(pairs.iter().map(|(r, name, c)| json!({"role": r, "name": name, "content": c})).collect())
}

#[tokio::test]
async fn a_users_entities_are_listed_fetched_searched_and_forgotten() {
    let s = Server::start("");
    let day = 86_400_000i64;
    let sessions = [
        (
            "s1",
            1_700_000_000_000i64,
            turns(&[
                ("user", "Maya", "My sister is flying in next month, I need to plan a trip for us."),
                ("assistant", "", "How lovely! Where would you like to take her?"),
            ]),
        ),
        (
            "s2",
            1_700_000_000_000 + 20 * day,
            turns(&[
                ("user", "Maya", "My sister Ingrid loves hiking, so we are going to Mount Rainier in June."),
                ("assistant", "", "Mount Rainier is beautiful in June."),
            ]),
        ),
        (
            "s3",
            1_700_000_000_000 + 40 * day,
            turns(&[
                ("user", "Maya", "We adopted a puppy! My dog Biscuit already chewed my running shoes."),
                ("assistant", "", "Congratulations on Biscuit!"),
            ]),
        ),
    ];
    for (conv, t0, messages) in sessions {
        let mut messages = messages;
        for (i, m) in messages.as_array_mut().unwrap().iter_mut().enumerate() {
            m["time"] = json!(t0 + i as i64 * 1000);
            if m["name"] == "" {
                m.as_object_mut().unwrap().remove("name");
            }
        }
        s.write(conv, messages, json!({"message_count": 2}), "u-maya").await;
    }
    s.write(
        "other",
        msgs(&[("user", "My sister Ingrid is a vet."), ("assistant", "Nice.")]),
        json!({"message_count": 2}),
        "u-other",
    )
    .await;
    eventually(20, "extraction", || async {
        let jobs = s.jobs().await;
        (jobs.len() == 4 && jobs.iter().all(|j| j["state"] == "done")).then_some(())
    })
    .await;

    let list = s.ok("entity/list", json!({"collection_name": "c", "filter": {"user_id": "u-maya"}})).await;
    let entities = list["entities"].as_array().unwrap();
    let find =
        |name: &str| entities.iter().find(|e| e["name"] == name).unwrap_or_else(|| panic!("{name}: {list}")).clone();
    let ingrid = find("Ingrid");
    assert_eq!((ingrid["kind"].clone(), ingrid["aliases"].clone()), (json!("person"), json!(["sister"])), "{list}");
    assert_eq!(ingrid["event_count"], 2, "'my sister' of the first session is Ingrid too: {list}");
    assert_eq!(ingrid["first_seen"], 1_700_000_000_000i64);
    assert_eq!(find("Biscuit")["kind"], "pet");
    assert_eq!(find("Mount Rainier")["kind"], "place");
    assert_eq!(find("Maya")["event_count"], 3, "the speaker is in every session she spoke in");
    assert!(entities.iter().all(|e| e["name"] != "assistant"));
    let pets =
        s.ok("entity/list", json!({"collection_name": "c", "filter": {"user_id": "u-maya", "kind": "pet"}})).await;
    assert_eq!(pets["entities"].as_array().unwrap().len(), 1, "{pets}");
    let by_name = s
        .ok("entity/list", json!({"collection_name": "c", "filter": {"user_id": "u-maya", "name": "ingr"}, "limit": 5}))
        .await;
    assert_eq!(by_name["entities"][0]["entity_id"], ingrid["entity_id"]);

    // One entity by id, name or alias, with its events newest first.
    for which in [ingrid["entity_id"].clone(), json!("ingrid"), json!("sister")] {
        let got = s.ok("entity/get", json!({"collection_name": "c", "user_id": "u-maya", "entity": which})).await;
        assert_eq!(got["entity"]["entity_id"], ingrid["entity_id"]);
        let times: Vec<i64> = got["events"].as_array().unwrap().iter().map(|e| e["time"].as_i64().unwrap()).collect();
        assert!(times.len() == 2 && times[0] > times[1], "{got}");
    }
    // Another user's Ingrid is another entity; a user's entities are theirs alone.
    let theirs = s.ok("entity/get", json!({"collection_name": "c", "user_id": "u-other", "entity": "Ingrid"})).await;
    assert_ne!(theirs["entity"]["entity_id"], ingrid["entity_id"]);
    let (st, v) =
        s.post("entity/get", json!({"collection_name": "c", "user_id": "u-other", "entity": "Biscuit"})).await;
    assert_eq!(st, 404, "{v}");

    // filter.entity narrows a search to the entity's events.
    let hits = s
        .ok(
            "event/search",
            json!({"collection_name": "c", "query": "trip", "filter": {"user_id": "u-maya", "entity": "Biscuit"}}),
        )
        .await;
    assert_eq!(hits["count"], 1, "{hits}");
    assert!(hits["result_list"][0]["memory_info"]["original_messages"].as_str().unwrap().contains("Biscuit"));

    // A question naming Ingrid lifts what the memory says of "my sister" (Ingrid, by the second
    // session) by 0.3 of its relevance; the puppy is not lifted.
    let query = "When is Ingrid flying in for the trip?";
    let hits =
        s.ok("event/search", json!({"collection_name": "c", "query": query, "filter": {"user_id": "u-maya"}})).await;
    let of = |needle: &str| {
        let hit = hits["result_list"]
            .as_array()
            .unwrap()
            .iter()
            .find(|h| h["memory_info"]["original_messages"].as_str().unwrap().contains(needle));
        let hit = hit.unwrap_or_else(|| panic!("{needle}: {hits}"));
        (hit["score"].as_f64().unwrap(), hit["origin_score"].as_f64().unwrap())
    };
    let ((trip, trip_origin), (puppy, puppy_origin)) = (of("flying in next month"), of("Biscuit"));
    assert!(
        trip_origin > 0.0 && (trip - 1.3 * trip_origin).abs() < 1e-6,
        "the first session's 'my sister' is Ingrid: {hits}"
    );
    assert_eq!(puppy, puppy_origin, "{hits}");

    // Bad input: named fields and ranges.
    let bad = [
        (
            "entity/list",
            json!({"collection_name": "c", "filter": {"user_id": "u-maya", "kind": "planet"}}),
            "filter.kind",
        ),
        ("entity/list", json!({"collection_name": "c", "filter": {"user_id": "u-maya"}, "limit": 0}), "limit"),
        ("entity/list", json!({"collection_name": "c", "filter": {}}), "user_id"),
        ("entity/get", json!({"collection_name": "c", "user_id": "u-maya", "entity": ""}), "entity"),
        (
            "event/search",
            json!({"collection_name": "c", "filter": {"user_id": ["u-maya", "u-other"], "entity": "Ingrid"}}),
            "filter.entity",
        ),
        (
            "event/batch_delete",
            json!({"collection_name": "c", "filter": {"user_id": "u-maya", "entity": "Ingrid"}}),
            "filter.entity",
        ),
    ];
    for (path, body, field) in bad {
        let (st, v) = s.post(path, body.clone()).await;
        assert_eq!(st, 400, "{path} {body}: {v}");
        assert!(v["message"].as_str().unwrap().contains(field), "{path}: {v}");
    }

    // Forgotten with the user.
    s.ok("user/forget", json!({"collection_name": "c", "user_id": "u-maya"})).await;
    let after = s.ok("entity/list", json!({"collection_name": "c", "filter": {"user_id": "u-maya"}})).await;
    assert_eq!(after["count"], 0, "{after}");
}
