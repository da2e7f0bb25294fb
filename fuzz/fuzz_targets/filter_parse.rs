//! Any text as Algolia's `filters` (and as one `facetFilters` and `numericFilters` element)
//! parses to a filter or an error, never panics nor overflows the stack; what parses matches
//! a record without panicking.

#![no_main]

use libfuzzer_sys::fuzz_target;
use penchant_model::recommend::filters::Filter;
use serde_json::{Value, json};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let record = json!({"objectID": "x", "brand": "Apple", "price": 10, "tags": ["a", "b"],
        "categories": {"lvl0": "Phones"}});
    let record = record.as_object().unwrap();
    if let Ok(Some(filter)) = Filter::parse(Some(text), None, None) {
        let _ = filter.matches(record);
    }
    let list = Value::Array(vec![Value::String(text.to_owned())]);
    if let Ok(Some(filter)) = Filter::parse(None, Some(&list), Some(&list)) {
        let _ = filter.matches(record);
    }
});
