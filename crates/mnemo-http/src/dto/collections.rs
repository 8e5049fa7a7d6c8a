//! Collection bodies: `collection/create` (ours and VikingDB's `CreateCollection` with its event and
//! profile types) and the collection record as answered.

use super::*;

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CollectionCreate {
    pub collection_name: String,
    #[serde(default = "default_project")]
    pub project_name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub event_types: Vec<EventTypeDef>,
    #[serde(default)]
    pub profile_types: Vec<ProfileTypeDef>,
    #[serde(default)]
    pub temporary_ttl_days: Option<f64>,
    /// `rules` or `llm` (when the server has one); the server default when absent.
    #[serde(default)]
    pub extractor: Option<String>,
    /// How long the collection's other events live, in seconds (1..=315576000; VikingDB's
    /// `TtlRelative`); never expire when absent.
    #[serde(default)]
    pub event_ttl_secs: Option<i64>,
}

/// VikingDB's CreateCollection body (PascalCase), accepted on `collection/create` beside mnemo's
/// and mapped onto it. Cloud capacity knobs and what mnemo cannot do are refused by name.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "PascalCase")]
pub struct VikingCollectionCreate {
    pub collection_name: String,
    #[serde(default)]
    pub project_name: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
    /// Seconds, 1..=315576000.
    #[serde(default)]
    pub ttl_relative: Option<i64>,
    /// `sys_event_v1` (always present in mnemo), `sys_profile_collect_v1` (folded into `sys_profile_v1`).
    #[serde(default)]
    pub builtin_event_types: Option<Vec<String>>,
    /// `sys_profile_v1` (always present in mnemo).
    #[serde(default, alias = "BuiltinEntityTypes")]
    pub builtin_profile_types: Option<Vec<String>>,
    #[serde(default)]
    pub custom_event_type_schemas: Option<Vec<VikingEventType>>,
    #[serde(default, alias = "CustomEntityTypeSchemas")]
    pub custom_profile_type_schemas: Option<Vec<VikingProfileType>>,
    /// Refused: cloud capacity (mnemo's is the machine it runs on).
    #[serde(default)]
    #[schemars(with = "Option<Value>")]
    pub collection_type: Option<Value>,
    /// Refused: cloud capacity.
    #[serde(default)]
    #[schemars(with = "Option<Value>")]
    pub cpu_quota: Option<Value>,
    /// Refused: cloud billing tags.
    #[serde(default)]
    #[schemars(with = "Option<Value>")]
    pub tags: Option<Value>,
    /// `text` only (image understanding needs an image-capable extractor).
    #[serde(default)]
    pub collection_modal_type: Option<String>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "PascalCase")]
pub struct VikingEventType {
    pub event_type: String,
    #[serde(default)]
    pub description: String,
    pub properties: Vec<VikingProperty>,
    /// A number (a fixed weight in [0,1]) or one numeric property's name.
    #[serde(default)]
    pub custom_weight_expression: Option<String>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "PascalCase")]
pub struct VikingProfileType {
    pub profile_type: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub properties: Vec<VikingProperty>,
    /// `user` only.
    #[serde(default)]
    pub role: Option<String>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "PascalCase")]
pub struct VikingProperty {
    pub property_name: String,
    /// `string`, `int64`, `float32`, `bool`.
    pub property_value_type: String,
    #[serde(default)]
    pub description: String,
    /// Refused when true: one profile per user and type (no keyed sub-profiles).
    #[serde(default)]
    pub is_primary_key: Option<bool>,
    /// Refused: aggregates over events are not supported.
    #[serde(default)]
    #[schemars(with = "Option<Value>")]
    pub aggregate_expression: Option<Value>,
}

fn viking_fields(props: Vec<VikingProperty>, at: &str) -> Result<Vec<Value>, CoreError> {
    let mut out = Vec::with_capacity(props.len());
    for (i, p) in props.into_iter().enumerate() {
        let f = format!("{at}.Properties[{i}]");
        let ty = match p.property_value_type.as_str() {
            "string" => "string",
            "int64" | "int32" | "int" => "int",
            "float32" | "float64" | "float" => "float",
            "bool" => "bool",
            other => {
                return Err(CoreError::invalid(
                    format!("{f}.PropertyValueType"),
                    format!("must be one of string, int64, float32, bool (lists are not supported yet), got {other:?}"),
                ));
            }
        };
        if p.is_primary_key == Some(true) {
            return Err(CoreError::invalid(
                format!("{f}.IsPrimaryKey"),
                "keyed profiles are not supported: a user has one profile per type",
            ));
        }
        if p.aggregate_expression.is_some() {
            return Err(CoreError::invalid(
                format!("{f}.AggregateExpression"),
                "aggregates over events are not supported; profile attributes come from extraction",
            ));
        }
        out.push(json!({"name": p.property_name, "type": ty, "description": p.description}));
    }
    Ok(out)
}

impl VikingCollectionCreate {
    /// mnemo's body for the same collection.
    pub fn into_mnemo(self) -> Result<Map<String, Value>, CoreError> {
        for (field, v) in
            [("CollectionType", &self.collection_type), ("CpuQuota", &self.cpu_quota), ("Tags", &self.tags)]
        {
            if v.is_some() {
                return Err(CoreError::invalid(
                    field,
                    "a cloud capacity or billing setting; a self-hosted mnemo's capacity is its machine — leave it out",
                ));
            }
        }
        if let Some(m) = self.collection_modal_type.as_deref().filter(|m| *m != "text") {
            return Err(CoreError::invalid(
                "CollectionModalType",
                format!("only \"text\": images are kept as references, not understood (got {m:?})"),
            ));
        }
        let builtins = |v: Option<Vec<String>>, field: &str, allowed: &[&str]| -> Result<(), CoreError> {
            match v.unwrap_or_default().into_iter().find(|t| !allowed.contains(&t.as_str())) {
                Some(t) => Err(CoreError::invalid(field, format!("must list only {}; got {t:?}", allowed.join(", ")))),
                None => Ok(()),
            }
        };
        builtins(self.builtin_event_types, "BuiltinEventTypes", &["sys_event_v1", "sys_profile_collect_v1"])?;
        builtins(self.builtin_profile_types, "BuiltinProfileTypes", &["sys_profile_v1"])?;
        let mut event_types = Vec::new();
        for (i, t) in self.custom_event_type_schemas.unwrap_or_default().into_iter().enumerate() {
            let at = format!("CustomEventTypeSchemas[{i}]");
            let fields = viking_fields(t.properties, &at)?;
            let mut def = json!({"name": t.event_type, "description": t.description, "fields": fields});
            match t.custom_weight_expression.as_deref().map(str::trim) {
                None | Some("") => {}
                Some(e) => match e.parse::<f64>() {
                    Ok(w) => def["weight"] = json!(w),
                    Err(_) if def["fields"].as_array().is_some_and(|f| f.iter().any(|f| f["name"] == e)) => {
                        def["weight_field"] = json!(e)
                    }
                    Err(_) => {
                        return Err(CoreError::invalid(
                            format!("{at}.CustomWeightExpression"),
                            format!(
                                "must be a number or one property's name (expressions are not supported yet), got {e:?}"
                            ),
                        ));
                    }
                },
            }
            event_types.push(def);
        }
        let mut profile_types = Vec::new();
        for (i, t) in self.custom_profile_type_schemas.unwrap_or_default().into_iter().enumerate() {
            let at = format!("CustomProfileTypeSchemas[{i}]");
            if let Some(r) = t.role.as_deref().filter(|r| *r != "user") {
                return Err(CoreError::invalid(format!("{at}.Role"), format!("only \"user\" profiles, got {r:?}")));
            }
            let fields = viking_fields(t.properties, &at)?;
            profile_types.push(json!({"name": t.profile_type, "description": t.description, "fields": fields}));
        }
        let mut body = json!({
            "collection_name": self.collection_name,
            "project_name": self.project_name.unwrap_or_else(default_project),
            "description": self.description.unwrap_or_default(),
            "event_types": event_types,
            "profile_types": profile_types,
        });
        if let Some(ttl) = self.ttl_relative {
            body["event_ttl_secs"] = json!(ttl);
        }
        Ok(body.as_object().expect("an object").clone())
    }
}

pub fn collection_json(c: &Collection) -> Value {
    json!({
        "collection_name": c.collection_name,
        "project_name": c.project_name,
        "description": c.description,
        "event_types": c.schema.event_types,
        "profile_types": c.schema.profile_types,
        "temporary_ttl_days": c.schema.temporary_ttl_days,
        "extractor": c.schema.extractor,
        "event_ttl_secs": c.schema.event_ttl_secs,
        "created_at": c.created_at,
        "resource_id": format!("{}/{}", c.project_name, c.collection_name),
    })
}

/// VikingDB's names for the built-in types, accepted wherever a type is named.
pub fn canonical_type(name: String) -> String {
    match name.as_str() {
        "sys_event_v1" => EVENT_V1.to_string(),
        "sys_profile_v1" => PROFILE_V1.to_string(),
        _ => name,
    }
}

impl Scoped for CollectionCreate {
    fn project(&self) -> &str {
        &self.project_name
    }

    const REWRITES: bool = true;

    /// VikingDB's body (it names `CollectionName`) becomes mnemo's.
    fn rewrite(v: Map<String, Value>) -> Result<Map<String, Value>, crate::json::RewriteError> {
        use crate::json::RewriteError;
        if !v.contains_key("CollectionName") {
            return Ok(v);
        }
        let viking: VikingCollectionCreate =
            serde_path_to_error::deserialize(Value::Object(v)).map_err(RewriteError::Parse)?;
        viking.into_mnemo().map_err(RewriteError::Invalid)
    }
}
