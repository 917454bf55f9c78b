//! Tests of `registry`.

use super::*;

#[test]
fn frames_are_split_or_refused_with_the_reason() -> Result<(), String> {
    let confluent = |id, payload: &'static [u8]| Framed {
        id: SchemaId::Confluent(id),
        payload: std::borrow::Cow::Borrowed(payload),
    };
    assert_eq!(frame(&[0, 0, 0, 1, 2, 9, 9])?, confluent(258, &[9, 9]));
    assert_eq!(frame(&[0, 0, 0, 0, 7])?, confluent(7, &[]));
    assert!(frame(&[0, 0, 1]).is_err_and(|e| e.contains("too short")));
    assert!(frame(b"{}").is_err_and(|e| e.contains("magic byte")));
    assert!(frame(b"").is_err());

    let version = uuid::Uuid::from_u128(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef);
    let mut glue = vec![3, 0];
    glue.extend_from_slice(version.as_bytes());
    glue.extend_from_slice(b"payload");
    let framed = frame(&glue)?;
    assert_eq!(
        (framed.id, framed.payload.as_ref()),
        (SchemaId::Glue(version), &b"payload"[..])
    );
    let mut zlib = glue[..18].to_vec();
    zlib[1] = 5;
    let mut compress = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    std::io::Write::write_all(&mut compress, b"payload").map_err(|e| e.to_string())?;
    zlib.extend(compress.finish().map_err(|e| e.to_string())?);
    assert_eq!(frame(&zlib)?.payload.as_ref(), b"payload");
    zlib.truncate(20);
    assert!(frame(&zlib).is_err_and(|e| e.contains("does not inflate")));
    glue[1] = 1;
    assert!(frame(&glue).is_err_and(|e| e.contains("compression 1")));
    assert!(frame(&glue[..17]).is_err_and(|e| e.contains("too short")));
    Ok(())
}

#[test]
fn credentials_parse_without_quoting_the_document() {
    let parsed = RegistryCredentials::from_json(r#"{"username": "key", "password": "pw"}"#, "file");
    assert!(parsed.is_ok_and(|c| c.username.as_deref() == Some("key")));
    for refused in [
        r#"password=s3cret"#,
        r#"{"password": "s3cret"}"#,
        r#"{"user": "s3cret"}"#,
    ] {
        let error = RegistryCredentials::from_json(refused, "secret x")
            .err()
            .unwrap_or_default();
        assert!(
            error.starts_with("secret x") && !error.contains("s3cret"),
            "{error}"
        );
    }
}

#[test]
fn credentials_never_print() {
    let credentials = RegistryCredentials {
        username: Some("key".into()),
        password: Some("s3cret".into()),
        token: Some("t0ken".into()),
    };
    let printed = format!("{credentials:?}");
    assert!(
        !printed.contains("s3cret") && !printed.contains("t0ken"),
        "{printed}"
    );
}
