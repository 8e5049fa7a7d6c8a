//! VikingDB's second auth mode: an AK/SK pair, each request signed with Volcengine's signature V4
//! (HMAC-SHA256 over the canonical request; what the `volcengine` package's `SignerV4.sign` does
//! for the VikingDB SDK's `IAM(ak, sk)`). The server holds the pairs (`server.api_keys` entries
//! with `access_key` and a secret); a request signed by a known pair gets the same rights as a key.
//!
//! ```text
//! Authorization: HMAC-SHA256 Credential=<AK>/<YYYYMMDD>/<region>/<service>/request,
//!                SignedHeaders=content-type;x-content-sha256;x-date, Signature=<hex>
//! canonical request = METHOD \n path \n sorted query \n "name:value\n"… \n signed names \n sha256(body)
//! string to sign    = HMAC-SHA256 \n X-Date \n <date>/<region>/<service>/request \n sha256(canonical)
//! signing key       = HMAC(HMAC(HMAC(HMAC(SK, date), region), service), "request")
//! ```

use axum::http::{HeaderMap, Method};
use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};

/// How far a request's `X-Date` may be from the server's clock (a stale signature is refused).
pub const MAX_SKEW_SECS: i64 = 15 * 60;

/// The parts of a `HMAC-SHA256 …` Authorization header.
#[derive(Debug, PartialEq)]
pub struct SignedAuth<'a> {
    pub access_key: &'a str,
    pub date: &'a str,
    pub region: &'a str,
    pub service: &'a str,
    pub signed_headers: Vec<&'a str>,
    pub signature: &'a str,
}

/// `None` when the header is not a signature at all; `Err` when it is one, malformed.
pub fn parse(authorization: &str) -> Option<Result<SignedAuth<'_>, String>> {
    let rest = authorization.strip_prefix("HMAC-SHA256 ")?;
    Some(parse_fields(rest))
}

fn parse_fields(rest: &str) -> Result<SignedAuth<'_>, String> {
    let (mut credential, mut signed, mut signature) = (None, None, None);
    for part in rest.split(',') {
        let (k, v) = part.trim().split_once('=').ok_or("Authorization: malformed HMAC-SHA256 signature")?;
        match k {
            "Credential" => credential = Some(v),
            "SignedHeaders" => signed = Some(v),
            "Signature" => signature = Some(v),
            _ => {}
        }
    }
    let (Some(credential), Some(signed), Some(signature)) = (credential, signed, signature) else {
        return Err("Authorization: a HMAC-SHA256 signature needs Credential, SignedHeaders and Signature".into());
    };
    let scope: Vec<&str> = credential.split('/').collect();
    let [access_key, date, region, service, "request"] = scope[..] else {
        return Err("Authorization: Credential must be <AK>/<date>/<region>/<service>/request".into());
    };
    Ok(SignedAuth {
        access_key,
        date,
        region,
        service,
        signed_headers: signed.split(';').filter(|h| !h.is_empty()).collect(),
        signature,
    })
}

/// Percent-encodes like Python's `quote(s, safe='-_.~')` (the signer's query normalisation).
fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The query as the signer normalised it: keys sorted, both sides re-encoded.
fn canonical_query(raw: Option<&str>) -> String {
    let mut pairs: Vec<(String, String)> =
        raw.map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect()).unwrap_or_default();
    pairs.sort_by(|a, b| a.0.cmp(&b.0));
    pairs.iter().map(|(k, v)| format!("{}={}", quote(k), quote(v))).collect::<Vec<_>>().join("&")
}

fn hmac(key: &[u8], data: &str) -> Vec<u8> {
    let mut m = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key length");
    m.update(data.as_bytes());
    m.finalize().into_bytes().to_vec()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub fn body_hash(body: &[u8]) -> String {
    hex(&Sha256::digest(body))
}

/// The signature the holder of `secret` computes for this request.
pub fn signature(
    auth: &SignedAuth<'_>,
    secret: &str,
    method: &Method,
    path: &str,
    query: Option<&str>,
    headers: &HeaderMap,
    body_sha256: &str,
) -> Result<String, String> {
    let x_date = headers.get("x-date").and_then(|v| v.to_str().ok()).ok_or("X-Date: the signed request has none")?;
    let mut canonical_headers = String::new();
    for name in &auth.signed_headers {
        let value = match headers.get(*name).and_then(|v| v.to_str().ok()) {
            Some(v) => v.to_string(),
            None => return Err(format!("{name}: a signed header is missing")),
        };
        // The signer drops a default port from Host.
        let value = match *name {
            "host" => value.strip_suffix(":80").or_else(|| value.strip_suffix(":443")).unwrap_or(&value).to_string(),
            _ => value,
        };
        canonical_headers.push_str(&format!("{name}:{value}\n"));
    }
    let canonical = [
        method.as_str(),
        path,
        &canonical_query(query),
        &canonical_headers,
        &auth.signed_headers.join(";"),
        body_sha256,
    ]
    .join("\n");
    let scope = format!("{}/{}/{}/request", auth.date, auth.region, auth.service);
    let to_sign = format!("HMAC-SHA256\n{x_date}\n{scope}\n{}", hex(&Sha256::digest(canonical.as_bytes())));
    let key = hmac(&hmac(&hmac(&hmac(secret.as_bytes(), auth.date), auth.region), auth.service), "request");
    Ok(hex(&hmac(&key, &to_sign)))
}

/// Checks `X-Date` (format, and within `MAX_SKEW_SECS` of `now_ms`) against the credential's date.
pub fn check_date(auth: &SignedAuth<'_>, headers: &HeaderMap, now_ms: i64) -> Result<(), String> {
    let x_date = headers.get("x-date").and_then(|v| v.to_str().ok()).ok_or("X-Date: the signed request has none")?;
    let t = chrono::NaiveDateTime::parse_from_str(x_date, "%Y%m%dT%H%M%SZ")
        .map_err(|_| format!("X-Date: must be YYYYMMDDTHHMMSSZ, got {x_date:?}"))?
        .and_utc()
        .timestamp_millis();
    if !x_date.starts_with(auth.date) {
        return Err("Authorization: the credential's date is not X-Date's".into());
    }
    if (now_ms - t).abs() > MAX_SKEW_SECS * 1000 {
        return Err(format!(
            "X-Date: the signature is stale ({x_date} is more than {} minutes from the server's clock)",
            MAX_SKEW_SECS / 60
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    // A request signed by the volcengine package's SignerV4 (vikingdb-python-sdk 0.1.35's IAM
    // auth), captured with its X-Date pinned: AK "AKTEST", SK "secret-key-for-tests".
    #[test]
    fn a_signature_made_by_the_volcengine_signer_verifies() {
        let body = br#"{"collection_name": "c1", "project_name": "default"}"#;
        let mut headers = HeaderMap::new();
        headers.insert("content-type", "application/json".parse().unwrap());
        headers.insert("x-date", "20261201T063000Z".parse().unwrap());
        headers.insert("x-content-sha256", body_hash(body).parse().unwrap());
        let header = "HMAC-SHA256 Credential=AKTEST/20261201/cn-beijing/air/request, \
                      SignedHeaders=content-type;x-content-sha256;x-date, \
                      Signature=df7f00f1e836f416676d1f5fc3f2b4804aded20f226878cde915603119a4018f";
        let auth = parse(header).unwrap().unwrap();
        assert_eq!(auth.access_key, "AKTEST");
        assert_eq!(auth.signed_headers, ["content-type", "x-content-sha256", "x-date"]);
        let sig = signature(
            &auth,
            "secret-key-for-tests",
            &Method::POST,
            "/api/memory/collection/info",
            Some(""),
            &headers,
            &body_hash(body),
        )
        .unwrap();
        assert_eq!(sig, EXPECTED);
        let other = signature(
            &auth,
            "another-secret",
            &Method::POST,
            "/api/memory/collection/info",
            None,
            &headers,
            &body_hash(body),
        )
        .unwrap();
        assert_ne!(other, EXPECTED);
    }

    const EXPECTED: &str = "df7f00f1e836f416676d1f5fc3f2b4804aded20f226878cde915603119a4018f";

    #[test]
    fn a_stale_or_malformed_date_is_refused() {
        let auth = parse("HMAC-SHA256 Credential=A/20261201/r/s/request, SignedHeaders=x-date, Signature=00")
            .unwrap()
            .unwrap();
        let mut h = HeaderMap::new();
        h.insert("x-date", "20261201T063000Z".parse().unwrap());
        let at = chrono::DateTime::parse_from_rfc3339("2026-12-01T06:30:00Z").unwrap().timestamp_millis();
        assert!(check_date(&auth, &h, at + 60_000).is_ok());
        assert!(check_date(&auth, &h, at + 16 * 60_000).unwrap_err().contains("stale"));
        h.insert("x-date", "2026-12-01".parse().unwrap());
        assert!(check_date(&auth, &h, at).unwrap_err().contains("YYYYMMDD"));
        assert!(parse("HMAC-SHA256 Credential=A/x, SignedHeaders=, Signature=0").unwrap().is_err());
        assert!(parse("Bearer abc").is_none());
    }
}
