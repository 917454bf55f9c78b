//! URLs that may carry credentials: a schema registry's `https://user:password@…`, a
//! catalog's `postgres://user:password@…`, an endpoint with `?token=…`. A
//! [`SecretUrl`] holds the URL as given, for the one place that connects with it
//! ([`SecretUrl::expose`]); everything else it does (`Display`, `Debug`,
//! `Serialize`) prints it without its secrets ([`redact`]): the password of its
//! user information (or all of it, when it is a single token), and the values of
//! query and fragment parameters whose names say they are secret. [`redact_text`]
//! does the same to every URL inside a free text (a foreign error's message) before
//! it is printed or kept.

/// What a redacted secret is replaced with.
pub const HIDDEN: &str = "***";

/// A URL whose secrets are never printed; see the module.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct SecretUrl(String);

impl SecretUrl {
    /// The URL `text`, as given.
    pub fn new(text: impl Into<String>) -> Self {
        Self(text.into())
    }

    /// The URL with its secrets: for connecting only, never for a message.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The URL without its secrets (what `Display` prints).
    pub fn redacted(&self) -> String {
        redact(&self.0)
    }

    /// The URL's scheme, lowercase (`https`), when it has one.
    pub fn scheme(&self) -> Option<String> {
        self.0
            .split_once("://")
            .map(|(scheme, _)| scheme.to_ascii_lowercase())
    }

    /// Whether the URL starts with `prefix` (a scheme: `"postgres://"`).
    pub fn starts_with(&self, prefix: &str) -> bool {
        self.0.starts_with(prefix)
    }
}

impl From<String> for SecretUrl {
    fn from(text: String) -> Self {
        Self(text)
    }
}

impl From<&str> for SecretUrl {
    fn from(text: &str) -> Self {
        Self(text.to_owned())
    }
}

impl std::fmt::Display for SecretUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.redacted())
    }
}

impl std::fmt::Debug for SecretUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.redacted())
    }
}

impl serde::Serialize for SecretUrl {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.redacted())
    }
}

impl<'de> serde::Deserialize<'de> for SecretUrl {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(Self)
    }
}

/// Whether a query or fragment parameter named `name` holds a secret.
fn secret_parameter(name: &str) -> bool {
    const WORDS: &[&str] = &[
        "password",
        "passwd",
        "pwd",
        "secret",
        "token",
        "signature",
        "credential",
        "apikey",
        "api_key",
        "api-key",
        "accesskey",
        "access_key",
        "auth",
        "session",
    ];
    let name = name.to_ascii_lowercase();
    name == "sig" || name == "key" || WORDS.iter().any(|word| name.contains(word))
}

/// `parameters` (`a=1&b=2`, `;` also separating) with the values of secret ones hidden.
fn redact_parameters(parameters: &str) -> String {
    let mut out = String::with_capacity(parameters.len());
    let mut rest = parameters;
    loop {
        let end = rest.find(['&', ';']).unwrap_or(rest.len());
        let (pair, tail) = rest.split_at(end);
        match pair.split_once('=') {
            Some((name, value)) if !value.is_empty() && secret_parameter(name) => {
                out.push_str(name);
                out.push('=');
                out.push_str(HIDDEN);
            }
            _ => out.push_str(pair),
        }
        let Some(separator) = tail.chars().next() else {
            return out;
        };
        out.push(separator);
        rest = &tail[separator.len_utf8()..];
    }
}

/// The URL `url` (with or without a scheme) without its secrets: the password of its
/// user information (all of it when it has no `:`), and secret parameters' values.
pub fn redact(url: &str) -> String {
    let (scheme, rest) = match url.find("://") {
        Some(at) => url.split_at(at + 3),
        None => ("", url),
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let mut out = String::with_capacity(url.len());
    out.push_str(scheme);
    match authority.rfind('@') {
        Some(at) => {
            let (userinfo, host) = authority.split_at(at);
            if let Some((user, _)) = userinfo.split_once(':') {
                out.push_str(user);
                out.push(':');
            }
            out.push_str(HIDDEN);
            out.push_str(host);
        }
        None => out.push_str(authority),
    }
    let (path_query, fragment) = match tail.find('#') {
        Some(at) => tail.split_at(at),
        None => (tail, ""),
    };
    match path_query.split_once('?') {
        Some((path, query)) => {
            out.push_str(path);
            out.push('?');
            out.push_str(&redact_parameters(query));
        }
        None => out.push_str(path_query),
    }
    if let Some(fragment) = fragment.strip_prefix('#') {
        out.push('#');
        out.push_str(&redact_parameters(fragment));
    }
    out
}

/// Whether `c` may be part of a URL's scheme.
fn scheme_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')
}

/// Whether `c` ends a URL quoted in a free text.
fn url_end(c: char) -> bool {
    c.is_whitespace() || matches!(c, '"' | '\'' | '`' | '<' | '>' | '\\' | ')' | ']' | '}')
}

/// `text` with every `scheme://…` URL in it redacted (see [`redact`]): for messages
/// that foreign code (an HTTP client, a database driver) wrote.
pub fn redact_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let start = rest[..at]
            .char_indices()
            .rev()
            .take_while(|(_, c)| scheme_char(*c))
            .last()
            .map_or(at, |(i, _)| i);
        let end = rest[at + 3..]
            .find(url_end)
            .map_or(rest.len(), |i| at + 3 + i);
        out.push_str(&rest[..start]);
        out.push_str(&redact(&rest[start..end]));
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "s3cr3t-XYZ";

    #[test]
    fn a_url_prints_without_its_password_or_secret_parameters() {
        for (given, printed) in [
            (
                "https://kfs:s3cr3t-XYZ@registry:8081/x",
                "https://kfs:***@registry:8081/x",
            ),
            (
                "postgres://iceberg:s3cr3t-XYZ@db:5432/iceberg?sslmode=require",
                "postgres://iceberg:***@db:5432/iceberg?sslmode=require",
            ),
            ("https://s3cr3t-XYZ@host", "https://***@host"),
            ("user:s3cr3t-XYZ@etcd:2379", "user:***@etcd:2379"),
            (
                "http://h/p?a=1&token=s3cr3t-XYZ;X-Amz-Signature=s3cr3t-XYZ&b=2",
                "http://h/p?a=1&token=***;X-Amz-Signature=***&b=2",
            ),
            (
                "https://h/?password=s3cr3t-XYZ#access_token=s3cr3t-XYZ&x=y",
                "https://h/?password=***#access_token=***&x=y",
            ),
            ("https://h/p?sig=s3cr3t-XYZ", "https://h/p?sig=***"),
            (
                "http://127.0.0.1:8181/catalog",
                "http://127.0.0.1:8181/catalog",
            ),
            ("etcd:2379", "etcd:2379"),
            ("", ""),
        ] {
            let url = SecretUrl::from(given);
            assert_eq!(url.to_string(), printed, "{given}");
            assert_eq!(format!("{url:?}"), format!("{printed:?}"));
            assert_eq!(
                serde_json::to_string(&url).ok(),
                Some(format!("{printed:?}"))
            );
            assert_eq!(url.expose(), given);
        }
    }

    #[test]
    fn a_url_reads_from_settings_as_given() {
        let url: Result<SecretUrl, _> = serde_json::from_str("\"https://u:s3cr3t-XYZ@h\"");
        assert!(url.is_ok_and(|url| url.expose() == "https://u:s3cr3t-XYZ@h"
            && url.scheme().as_deref() == Some("https")
            && url.starts_with("https://")));
    }

    #[test]
    fn every_url_of_a_text_is_redacted() {
        let text = "error sending request for url (https://u:s3cr3t-XYZ@h/x?token=s3cr3t-XYZ): \
                    \"postgres://a:s3cr3t-XYZ@db/x\", and etcd+https://b:s3cr3t-XYZ@e; end";
        let redacted = redact_text(text);
        assert!(!redacted.contains(SECRET), "{redacted}");
        assert_eq!(
            redacted,
            "error sending request for url (https://u:***@h/x?token=***): \
             \"postgres://a:***@db/x\", and etcd+https://b:***@e; end"
        );
        assert_eq!(redact_text("no url: a://"), "no url: a://");
        assert_eq!(redact_text("://x:y@z"), "://x:***@z");
    }

    #[test]
    fn no_input_panics() {
        for text in [
            "@",
            "://@",
            "a://b@",
            "?",
            "#",
            "h?&&;=",
            "é://ü:ö@ä?ß=1",
            "x://a:b@c://d:e@f",
        ] {
            let _ = redact(text);
            let _ = redact_text(text);
        }
    }
}
