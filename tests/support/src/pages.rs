//! Reading the service's HTML pages.

/// The value of the hidden input `name` in a page (the dialog's `csrf`
/// and `query` fields).
#[track_caller]
pub fn hidden(html: &str, name: &str) -> String {
    let marker = format!(r#"name="{name}" value=""#);
    let start = html
        .find(&marker)
        .unwrap_or_else(|| panic!("no field {name} in {html}"))
        + marker.len();
    html[start..]
        .split('"')
        .next()
        .unwrap_or_default()
        .to_owned()
}
