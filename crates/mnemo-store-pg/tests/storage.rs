//! Vectors live in their rows: without schema v4 (`toast_tuple_target` a page) every row over
//! 2 KB had its vector moved to the TOAST table, and each read cost a TOAST index look-up and
//! chunk reads.

use mnemo_core::model::*;
use mnemo_core::store::Store;
mod common;

use serde_json::json;

#[tokio::test]
async fn vectors_of_the_default_model_are_stored_in_their_rows() {
    let schema = "vectors_inline";
    let Some((url, store)) = common::fresh_store("vector storage", schema).await else { return };
    let dim = 896; // the default model pair: 3,588 bytes a vector
    let c = store
        .create_collection(NewCollection {
            project_name: "default".into(),
            collection_name: "c".into(),
            description: String::new(),
            schema: CollectionSchema::default(),
            embedding_model: "test".into(),
            embedding_dim: dim as u32,
            created_at: 0,
        })
        .await
        .unwrap();
    let mut ids = Vec::new();
    for i in 0..20 {
        // Incompressible like a real embedding: small pseudo-random components, one dominant.
        let mut v: Vec<f32> = (0..dim).map(|j| ((j * 7919 + i * 104_729) % 1000) as f32 * 1e-5).collect();
        v[i] = 1.0;
        mnemo_core::embed::normalize(&mut v);
        let info = json!({"summary": format!("event {i}")}).as_object().unwrap().clone();
        let e = store
            .insert_event(NewEvent { embedding: Some(v), ..NewEvent::of_user(c.id, EVENT_V1, "u", info, i as i64) })
            .await
            .unwrap();
        ids.push(e.id);
    }
    let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(conn);
    // Rows in the TOAST table, and each stored vector's size in its row (pgvector: an 8-byte
    // header, then 4 bytes a dimension; a TOAST pointer would be 18).
    let toast_table: String = client
        .query_one(
            &format!(
                "SELECT reltoastrelid::regclass::text FROM pg_class WHERE oid = '{schema}.event_vectors'::regclass"
            ),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let toasted: i64 = client.query_one(&format!("SELECT count(*) FROM {toast_table}"), &[]).await.unwrap().get(0);
    let sizes: Vec<i32> = client
        .query(&format!("SELECT pg_column_size(vec) FROM {schema}.event_vectors"), &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(toasted, 0, "nothing of the rows went to the TOAST table");
    assert_eq!(sizes, vec![8 + 4 * dim as i32; ids.len()], "each vector whole in its row");
    // And they are read back whole: each event's own unit vector scores 1 against itself.
    let mut q = vec![0.0f32; dim];
    q[7] = 1.0;
    let got = store
        .search_candidates(
            c.id,
            EventFilter { user_id: vec!["u".into()], active_only: true, ..Default::default() },
            CandidateQuery { vector: Some(q), terms: vec![], k: 3, vector_hits: None },
        )
        .await
        .unwrap();
    let best = got.iter().max_by(|a, b| a.cosine.partial_cmp(&b.cosine).unwrap()).unwrap();
    assert_eq!(best.event.id, ids[7], "the event whose dominant component the query names");
    mnemo_store_pg::drop_schema(&url, schema).await.unwrap();
}
