//! Algolia's filter syntax over catalog records: `filters`, `facetFilters` and
//! `numericFilters`, parsed once per request and evaluated on each candidate's record.
//!
//! `filters` is a boolean expression of `AND`, `OR`, `NOT` and parentheses over atoms:
//!
//! | atom | matches a record whose attribute ... |
//! |---|---|
//! | `brand:Apple`, `brand:"Hello Kitty"`, `categories.lvl0:Phones`, `objectID:x`, `_tags:new` | has that value (strings compared without case; numbers and booleans by their text) |
//! | `price < 10` (`<`, `<=`, `=`, `!=`, `>=`, `>`) | is a number that compares so |
//! | `price:10 TO 20` | is a number in the range, both ends included |
//!
//! An attribute that is an array matches if any element does; a dotted path walks nested
//! objects (and arrays of objects); a missing attribute matches no atom, so `NOT brand:Apple`
//! keeps records without a brand, and `price != 10` is `NOT price = 10`. `facetFilters` is a
//! string or an array whose elements are ANDed, an inner array ORed, each `attribute:value`
//! (`attribute:-value` negates it, `\-` is a literal dash); `numericFilters` has the same shape
//! with numeric atoms. Penchant accepts every nesting of `AND`, `OR` and `NOT` (Algolia refuses
//! some mixes, such as `(a AND b) OR c`): a superset. A malformed filter is an error naming the
//! parameter and the 1-based column of the offending token.
//!
//! Limits, for any caller with a search key: `filters` is at most [`MAX_FILTERS_BYTES`] long and
//! nests at most [`MAX_DEPTH`] parentheses and `NOT`s deep; `facetFilters` and `numericFilters`
//! hold at most [`MAX_LIST_FILTERS`] filters each. The parser, [`Filter::matches`] and the
//! tree's drop recurse once per nesting level, so the depth bound is what keeps a hostile filter
//! from overflowing a worker's stack; a flat chain (`a OR b OR c ...`) is one n-ary node, not a
//! level per operand.

use std::fmt;

use serde_json::{Map, Value};

/// The longest `filters` string, in bytes. Algolia documents no limit on the string (it caps a
/// query at 1,000 filters); 64 KiB holds a thousand `objectID:...` atoms of 60 bytes each.
pub const MAX_FILTERS_BYTES: usize = 64 * 1024;
/// The deepest nesting of `filters`: parentheses and `NOT`s together. Hand-written and generated
/// filters nest a few levels; 64 keeps the parser's recursion (3 frames a level), `matches` and
/// the tree's drop a few dozen kilobytes deep at most, far from a worker thread's 2 MiB stack.
pub const MAX_DEPTH: usize = 64;
/// The most filters in a `facetFilters` or `numericFilters` list, inner lists' elements counted:
/// Algolia's limit on the filters of one query.
pub const MAX_LIST_FILTERS: usize = 1000;

/// A malformed filter: the message says what and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilterError(pub String);

impl fmt::Display for FilterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for FilterError {}

/// A numeric comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Lt,
    Le,
    Eq,
    Ne,
    Ge,
    Gt,
}

impl Op {
    fn holds(self, x: f64, y: f64) -> bool {
        match self {
            Op::Lt => x < y,
            Op::Le => x <= y,
            Op::Eq => x == y,
            Op::Ne => x != y,
            Op::Ge => x >= y,
            Op::Gt => x > y,
        }
    }
}

/// A compiled filter over records.
#[derive(Debug, Clone, PartialEq)]
pub enum Filter {
    And(Vec<Filter>),
    Or(Vec<Filter>),
    Not(Box<Filter>),
    Facet {
        attribute: String,
        value: String,
    },
    Numeric {
        attribute: String,
        op: Op,
        value: f64,
    },
    Range {
        attribute: String,
        low: f64,
        high: f64,
    },
}

impl Filter {
    /// Parse the three Algolia parameters (any may be absent; the present ones are ANDed).
    /// `None` when nothing restricts.
    pub fn parse(
        filters: Option<&str>,
        facet_filters: Option<&Value>,
        numeric_filters: Option<&Value>,
    ) -> Result<Option<Filter>, FilterError> {
        let mut all = Vec::new();
        if let Some(text) = filters.filter(|t| !t.trim().is_empty()) {
            if text.len() > MAX_FILTERS_BYTES {
                return Err(FilterError(format!(
                    "filters: {} bytes, the limit is {MAX_FILTERS_BYTES}",
                    text.len()
                )));
            }
            all.push(Parser::new(text, "filters")?.expression_to_end()?);
        }
        if let Some(value) = facet_filters {
            all.extend(list("facetFilters", value, facet_element)?);
        }
        if let Some(value) = numeric_filters {
            all.extend(list("numericFilters", value, numeric_element)?);
        }
        Ok(match all.len() {
            0 => None,
            1 => all.pop(),
            _ => Some(Filter::And(all)),
        })
    }

    /// `attribute:value`.
    pub fn facet(attribute: &str, value: &str) -> Filter {
        Filter::Facet {
            attribute: attribute.to_owned(),
            value: value.to_owned(),
        }
    }

    /// Both filters.
    #[must_use]
    pub fn and(self, other: Filter) -> Filter {
        match self {
            Filter::And(mut all) => {
                all.push(other);
                Filter::And(all)
            }
            one => Filter::And(vec![one, other]),
        }
    }

    /// Whether a record passes.
    pub fn matches(&self, record: &Map<String, Value>) -> bool {
        match self {
            Filter::And(all) => all.iter().all(|f| f.matches(record)),
            Filter::Or(any) => any.iter().any(|f| f.matches(record)),
            Filter::Not(f) => !f.matches(record),
            Filter::Facet { attribute, value } => {
                leaves(record, attribute).any(|leaf| facet_equals(leaf, value))
            }
            Filter::Numeric {
                attribute,
                op: Op::Ne,
                value,
            } => !leaves(record, attribute).any(|l| l.as_f64() == Some(*value)),
            Filter::Numeric {
                attribute,
                op,
                value,
            } => leaves(record, attribute).any(|l| l.as_f64().is_some_and(|x| op.holds(x, *value))),
            Filter::Range {
                attribute,
                low,
                high,
            } => leaves(record, attribute)
                .any(|l| l.as_f64().is_some_and(|x| *low <= x && x <= *high)),
        }
    }
}

/// The scalar values at a dotted path, arrays flattened along the way.
fn leaves<'r>(record: &'r Map<String, Value>, path: &str) -> impl Iterator<Item = &'r Value> {
    let mut current: Vec<&Value> = match record.get(path) {
        // An attribute whose name holds a dot is found whole first.
        Some(value) => vec![value],
        None => {
            let mut parts = path.split('.');
            let first = parts.next().and_then(|p| record.get(p));
            let mut current: Vec<&Value> = first.into_iter().collect();
            for part in parts {
                current = flatten(current)
                    .filter_map(|v| v.as_object()?.get(part))
                    .collect();
            }
            current
        }
    };
    current = flatten(current).collect();
    current.into_iter()
}

fn flatten(values: Vec<&Value>) -> impl Iterator<Item = &Value> {
    values.into_iter().flat_map(|v| match v {
        Value::Array(items) => items.iter().collect::<Vec<_>>(),
        other => vec![other],
    })
}

/// Whether a record's scalar equals a facet filter's value.
fn facet_equals(leaf: &Value, value: &str) -> bool {
    match leaf {
        Value::String(s) => s.to_lowercase() == value.to_lowercase(),
        Value::Number(n) => match (n.as_f64(), value.parse::<f64>()) {
            (Some(x), Ok(y)) => x == y,
            _ => false,
        },
        Value::Bool(b) => value.eq_ignore_ascii_case(if *b { "true" } else { "false" }),
        _ => false,
    }
}

/// A `facetFilters` or `numericFilters` value: a string, or an array of strings (ANDed) and
/// arrays of strings (ORed).
fn list(
    what: &str,
    value: &Value,
    element: fn(&str, &str) -> Result<Filter, FilterError>,
) -> Result<Vec<Filter>, FilterError> {
    let shape = || {
        FilterError(format!(
            "{what} must be a string or an array of strings and arrays of strings"
        ))
    };
    match value {
        Value::String(s) => Ok(vec![element(what, s)?]),
        Value::Array(items) => {
            let count: usize = items
                .iter()
                .map(|item| item.as_array().map_or(1, Vec::len))
                .sum();
            if count > MAX_LIST_FILTERS {
                return Err(FilterError(format!(
                    "{what}: {count} filters, the limit is {MAX_LIST_FILTERS}"
                )));
            }
            items
                .iter()
                .enumerate()
                .map(|(i, item)| match item {
                    Value::String(s) => element(&format!("{what}[{i}]"), s),
                    Value::Array(inner) => {
                        let any = inner
                            .iter()
                            .enumerate()
                            .map(|(j, v)| match v {
                                Value::String(s) => element(&format!("{what}[{i}][{j}]"), s),
                                _ => Err(shape()),
                            })
                            .collect::<Result<Vec<_>, _>>()?;
                        Ok(Filter::Or(any))
                    }
                    _ => Err(shape()),
                })
                .collect()
        }
        _ => Err(shape()),
    }
}

/// One `facetFilters` element: `attribute:value`, `attribute:-value` (negated).
fn facet_element(what: &str, text: &str) -> Result<Filter, FilterError> {
    let Some((attribute, value)) = text.split_once(':') else {
        return Err(FilterError(format!(
            "{what}: \"{text}\" is not of the form attribute:value"
        )));
    };
    let attribute = unquote(attribute.trim());
    if attribute.is_empty() {
        return Err(FilterError(format!(
            "{what}: the attribute is empty at col 1"
        )));
    }
    let value = value.trim();
    let (negated, value) = match value.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, value.strip_prefix('\\').unwrap_or(value)),
    };
    let facet = Filter::facet(attribute, unquote(value));
    Ok(if negated {
        Filter::Not(Box::new(facet))
    } else {
        facet
    })
}

fn unquote(s: &str) -> &str {
    s.strip_prefix('"')
        .and_then(|s| s.strip_suffix('"'))
        .unwrap_or(s)
}

/// One `numericFilters` element: `attribute op number` or `attribute:low TO high`.
fn numeric_element(what: &str, text: &str) -> Result<Filter, FilterError> {
    let mut parser = Parser::new(text, what)?;
    let start = parser.peek_col();
    let filter = parser.atom()?;
    if matches!(filter, Filter::Facet { .. }) {
        return Err(FilterError(format!(
            "{what}: expected a numeric comparison (attribute < number) or a range \
             (attribute:low TO high) at col {start}"
        )));
    }
    parser.end()?;
    Ok(filter)
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Open,
    Close,
    Colon,
    Op(Op),
    /// A bare word (`AND`, `TO`, values) or a quoted string.
    Word(String, bool),
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Token::Open => f.write_str("'('"),
            Token::Close => f.write_str("')'"),
            Token::Colon => f.write_str("':'"),
            Token::Op(op) => write!(f, "'{}'", op_text(*op)),
            Token::Word(w, false) => write!(f, "'{w}'"),
            Token::Word(w, true) => write!(f, "\"{w}\""),
        }
    }
}

fn op_text(op: Op) -> &'static str {
    match op {
        Op::Lt => "<",
        Op::Le => "<=",
        Op::Eq => "=",
        Op::Ne => "!=",
        Op::Ge => ">=",
        Op::Gt => ">",
    }
}

/// A recursive-descent parser over tokens with their 1-based columns.
struct Parser<'a> {
    what: &'a str,
    tokens: Vec<(Token, usize)>,
    at: usize,
    /// The column just past the text, for errors at its end.
    end_col: usize,
    /// Parentheses and `NOT`s open around the token at `at`.
    depth: usize,
}

impl<'a> Parser<'a> {
    fn new(text: &str, what: &'a str) -> Result<Self, FilterError> {
        let chars: Vec<char> = text.chars().collect();
        let mut tokens = Vec::new();
        let mut i = 0;
        let err = |col: usize, m: &str| FilterError(format!("{what}: {m} at col {col}"));
        while i < chars.len() {
            let c = chars[i];
            let col = i + 1;
            match c {
                c if c.is_whitespace() => i += 1,
                '(' => {
                    tokens.push((Token::Open, col));
                    i += 1;
                }
                ')' => {
                    tokens.push((Token::Close, col));
                    i += 1;
                }
                ':' => {
                    tokens.push((Token::Colon, col));
                    i += 1;
                }
                '<' | '>' | '=' | '!' => {
                    let two = chars.get(i + 1) == Some(&'=');
                    let op = match (c, two) {
                        ('<', true) => Op::Le,
                        ('<', false) => Op::Lt,
                        ('>', true) => Op::Ge,
                        ('>', false) => Op::Gt,
                        ('=', _) => Op::Eq,
                        ('!', true) => Op::Ne,
                        _ => return Err(err(col, "unexpected '!' (did you mean '!=' or NOT?)")),
                    };
                    tokens.push((Token::Op(op), col));
                    i += if two && c != '=' { 2 } else { 1 };
                }
                '"' => {
                    let mut word = String::new();
                    i += 1;
                    loop {
                        match chars.get(i) {
                            None => return Err(err(col, "unterminated quoted string")),
                            Some('"') => break,
                            Some('\\') if chars.get(i + 1).is_some() => {
                                word.push(chars[i + 1]);
                                i += 2;
                            }
                            Some(ch) => {
                                word.push(*ch);
                                i += 1;
                            }
                        }
                    }
                    i += 1;
                    tokens.push((Token::Word(word, true), col));
                }
                _ => {
                    let mut word = String::new();
                    while let Some(&ch) = chars.get(i) {
                        if ch.is_whitespace() || "():<>=!\"".contains(ch) {
                            break;
                        }
                        word.push(ch);
                        i += 1;
                    }
                    tokens.push((Token::Word(word, false), col));
                }
            }
        }
        Ok(Self {
            what,
            tokens,
            at: 0,
            end_col: chars.len() + 1,
            depth: 0,
        })
    }

    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.at).map(|(t, _)| t)
    }

    fn peek_col(&self) -> usize {
        self.tokens.get(self.at).map_or(self.end_col, |(_, c)| *c)
    }

    fn keyword(&self, word: &str) -> bool {
        matches!(self.peek(), Some(Token::Word(w, false)) if w == word)
    }

    fn unexpected(&self, expected: &str) -> FilterError {
        let found = match self.tokens.get(self.at) {
            Some((token, _)) => format!("token {token}"),
            None => "end of filter".to_owned(),
        };
        FilterError(format!(
            "{}: unexpected {found}, expected {expected} at col {}",
            self.what,
            self.peek_col()
        ))
    }

    fn end(&self) -> Result<(), FilterError> {
        match self.peek() {
            None => Ok(()),
            Some(_) => Err(self.unexpected("AND, OR or the end of the filter")),
        }
    }

    fn expression_to_end(&mut self) -> Result<Filter, FilterError> {
        let filter = self.or()?;
        if matches!(self.peek(), Some(Token::Close)) {
            return Err(self.unexpected("AND, OR or the end of the filter (no '(' to close)"));
        }
        self.end()?;
        Ok(filter)
    }

    fn or(&mut self) -> Result<Filter, FilterError> {
        let mut any = vec![self.and()?];
        while self.keyword("OR") {
            self.at += 1;
            any.push(self.and()?);
        }
        Ok(if any.len() == 1 {
            any.remove(0)
        } else {
            Filter::Or(any)
        })
    }

    fn and(&mut self) -> Result<Filter, FilterError> {
        let mut all = vec![self.unary()?];
        while self.keyword("AND") {
            self.at += 1;
            all.push(self.unary()?);
        }
        Ok(if all.len() == 1 {
            all.remove(0)
        } else {
            Filter::And(all)
        })
    }

    fn unary(&mut self) -> Result<Filter, FilterError> {
        let not = self.keyword("NOT");
        if !not && !matches!(self.peek(), Some(Token::Open)) {
            return self.atom();
        }
        // Both recurse: bounded here, before they do.
        if self.depth == MAX_DEPTH {
            return Err(FilterError(format!(
                "{}: nesting deeper than {MAX_DEPTH} levels (parentheses and NOTs) at col {}",
                self.what,
                self.peek_col()
            )));
        }
        self.at += 1;
        self.depth += 1;
        let inner = if not {
            Filter::Not(Box::new(self.unary()?))
        } else {
            let inner = self.or()?;
            if !matches!(self.peek(), Some(Token::Close)) {
                return Err(self.unexpected("')'"));
            }
            self.at += 1;
            inner
        };
        self.depth -= 1;
        Ok(inner)
    }

    /// A word that is not a keyword.
    fn word(&mut self, expected: &str) -> Result<String, FilterError> {
        match self.peek() {
            Some(Token::Word(w, quoted))
                if *quoted || !matches!(w.as_str(), "AND" | "OR" | "NOT" | "TO") =>
            {
                let w = w.clone();
                self.at += 1;
                Ok(w)
            }
            _ => Err(self.unexpected(expected)),
        }
    }

    fn number(&mut self) -> Result<f64, FilterError> {
        let col = self.peek_col();
        let word = self.word("a number")?;
        match word.parse::<f64>() {
            Ok(x) if x.is_finite() => Ok(x),
            _ => Err(FilterError(format!(
                "{}: '{word}' is not a number at col {col}",
                self.what
            ))),
        }
    }

    fn atom(&mut self) -> Result<Filter, FilterError> {
        let attribute = self.word("a filter (attribute:value, attribute < number, ...)")?;
        match self.peek() {
            Some(Token::Colon) => {
                self.at += 1;
                let col = self.peek_col();
                let value = self.word("a value")?;
                if self.keyword("TO") {
                    self.at += 1;
                    let low = value.parse::<f64>().ok().filter(|x| x.is_finite());
                    let Some(low) = low else {
                        return Err(FilterError(format!(
                            "{}: '{value}' is not a number at col {col}",
                            self.what
                        )));
                    };
                    let high = self.number()?;
                    return Ok(Filter::Range {
                        attribute,
                        low,
                        high,
                    });
                }
                Ok(Filter::Facet { attribute, value })
            }
            Some(Token::Op(op)) => {
                let op = *op;
                self.at += 1;
                let value = self.number()?;
                Ok(Filter::Numeric {
                    attribute,
                    op,
                    value,
                })
            }
            _ => Err(self.unexpected("':' or a comparison after the attribute")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn record(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    fn parse(text: &str) -> Filter {
        Filter::parse(Some(text), None, None).unwrap().unwrap()
    }

    fn error(text: &str) -> String {
        Filter::parse(Some(text), None, None).unwrap_err().0
    }

    #[test]
    fn atoms_match_as_algolia_describes() {
        let r = record(json!({
            "objectID": "x1", "brand": "Apple", "price": 10.5, "stock": 0, "new": true,
            "tags": ["a", "b"], "categories": {"lvl0": "Phones"},
            "variants": [{"color": "red"}, {"color": "blue"}], "name": "Hello Kitty",
        }));
        for (text, expected) in [
            ("brand:Apple", true),
            ("brand:apple", true),
            ("brand:Samsung", false),
            ("objectID:x1", true),
            ("tags:b", true),
            ("categories.lvl0:Phones", true),
            ("variants.color:blue", true),
            ("name:\"Hello Kitty\"", true),
            ("price:10.5", true),
            ("new:true", true),
            ("price > 10", true),
            ("price >= 10.5", true),
            ("price < 10.5", false),
            ("price = 10.5", true),
            ("price != 10.5", false),
            ("missing != 3", true),
            ("price:10 TO 11", true),
            ("price:-1 TO 10", false),
            ("stock:0 TO 0", true),
            ("brand < 3", false),
            ("NOT brand:Samsung", true),
            ("NOT missing:x", true),
            ("brand:Apple AND price > 20", false),
            ("brand:Samsung OR price > 10", true),
            ("brand:Samsung OR brand:Apple AND price > 20", false),
            ("(brand:Samsung OR brand:Apple) AND NOT (price > 20)", true),
        ] {
            assert_eq!(parse(text).matches(&r), expected, "{text}");
        }
    }

    #[test]
    fn facet_and_numeric_lists_and_their_negations() {
        let r = record(json!({"brand": "Apple", "color": "red", "price": 5}));
        let f = |facets: Value, numeric: Option<Value>| {
            Filter::parse(None, Some(&facets), numeric.as_ref())
                .unwrap()
                .unwrap()
                .matches(&r)
        };
        assert!(f(json!("brand:Apple"), None));
        assert!(f(json!(["brand:Apple", ["color:blue", "color:red"]]), None));
        assert!(!f(
            json!(["brand:Apple", ["color:blue", "color:green"]]),
            None
        ));
        assert!(!f(json!(["brand:-Apple"]), None));
        assert!(f(json!(["brand:-Samsung"]), None));
        assert!(f(
            json!(["brand:\"Apple\""]),
            Some(json!(["price > 1", ["price < 0", "price:5 TO 6"]]))
        ));
        assert!(!f(json!([]), Some(json!("price > 5"))));
        assert_eq!(Filter::parse(None, None, None).unwrap(), None);
        assert_eq!(Filter::parse(Some("  "), None, None).unwrap(), None);
        let dash = Filter::parse(None, Some(&json!("code:\\-1")), None)
            .unwrap()
            .unwrap();
        assert!(dash.matches(&record(json!({"code": "-1"}))));
    }

    #[test]
    fn malformed_filters_name_the_column() {
        for (text, needle) in [
            ("brand:", "expected a value at col 7"),
            (
                "brand:Apple AND",
                "unexpected end of filter, expected a filter",
            ),
            ("(brand:Apple", "expected ')' at col 13"),
            ("brand:Apple)", "no '(' to close) at col 12"),
            ("price > ", "expected a number at col 9"),
            ("price > abc", "'abc' is not a number at col 9"),
            ("price:1 TO", "expected a number at col 11"),
            ("price:x TO 3", "'x' is not a number at col 7"),
            ("AND brand:x", "unexpected token 'AND', expected a filter"),
            ("brand:\"open", "unterminated quoted string at col 7"),
            (
                "brand Apple",
                "expected ':' or a comparison after the attribute at col 7",
            ),
            (
                "brand:Apple brand:Samsung",
                "expected AND, OR or the end of the filter at col 13",
            ),
            ("price ! 3", "unexpected '!'"),
        ] {
            let message = error(text);
            assert!(message.starts_with("filters: "), "{message}");
            assert!(
                message.contains(needle),
                "{text}: «{message}» lacks «{needle}»"
            );
        }
        let err = |facets: Value, numeric: Value| {
            Filter::parse(None, Some(&facets), Some(&numeric))
                .unwrap_err()
                .0
        };
        assert!(err(json!(["brand"]), json!([])).contains("facetFilters[0]: \"brand\" is not"));
        assert!(
            err(json!([["a:b", 3]]), json!([]))
                .contains("facetFilters must be a string or an array")
        );
        assert!(
            err(json!([]), json!(["price > x"])).contains("numericFilters[0]: 'x' is not a number")
        );
        assert!(
            err(json!([]), json!([["brand:Apple"]]))
                .contains("numericFilters[0][0]: expected a numeric")
        );
        assert!(err(json!(3), json!([])).contains("facetFilters must be"));
    }

    /// Run `f` on a thread with a small stack: a recursion per nesting level overflows it (and
    /// aborts the test binary) long before a few thousand levels.
    fn on_small_stack<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn(f)
            .unwrap()
            .join()
            .unwrap()
    }

    #[test]
    fn hostile_nesting_is_an_error_not_a_stack_overflow() {
        let messages = on_small_stack(|| {
            let nested = format!("{}brand:b{}", "(".repeat(4000), ")".repeat(4000));
            let nots = format!("{}brand:b", "NOT ".repeat(10_000));
            let unclosed = "(".repeat(3200);
            let mixed = "NOT (".repeat(2000);
            [nested, nots, unclosed, mixed]
                .iter()
                .map(|text| Filter::parse(Some(text), None, None).unwrap_err().0)
                .collect::<Vec<_>>()
        });
        for (message, col) in messages.iter().zip([65, 257, 65, 161]) {
            assert_eq!(
                message,
                &format!(
                    "filters: nesting deeper than 64 levels (parentheses and NOTs) at col {col}"
                )
            );
        }
    }

    #[test]
    fn filters_as_deep_as_the_limit_parse_and_match() {
        let r = record(json!({"brand": "Apple"}));
        let (deep, nots, both, chain) = on_small_stack(move || {
            let parse = |text: String| Filter::parse(Some(&text), None, None);
            let deep = parse(format!(
                "{}brand:Apple{}",
                "(".repeat(MAX_DEPTH),
                ")".repeat(MAX_DEPTH)
            ))
            .unwrap()
            .unwrap()
            .matches(&r);
            let nots = parse(format!("{}brand:Apple", "NOT ".repeat(MAX_DEPTH)))
                .unwrap()
                .unwrap()
                .matches(&r);
            // Half NOT, half parentheses, an OR at every level: a tree as deep as the limit.
            let half = MAX_DEPTH / 2;
            let both = parse(format!(
                "{}brand:Samsung{}",
                "NOT (brand:x OR ".repeat(half),
                ")".repeat(half)
            ))
            .unwrap()
            .unwrap()
            .matches(&r);
            // One level more is refused, by NOT or by '('.
            assert!(parse(format!("{}brand:Apple", "NOT ".repeat(MAX_DEPTH + 1))).is_err());
            assert!(
                parse(format!(
                    "{}brand:Apple{}",
                    "(".repeat(MAX_DEPTH + 1),
                    ")".repeat(MAX_DEPTH + 1)
                ))
                .is_err()
            );
            // A long flat chain is one n-ary node: no recursion per operand.
            let chain = (0..3000)
                .map(|i| format!("brand:b{i}"))
                .chain(["brand:Apple".to_owned()])
                .collect::<Vec<_>>()
                .join(" OR ");
            let chain = parse(chain).unwrap().unwrap();
            let Filter::Or(any) = &chain else {
                panic!("not one OR node");
            };
            assert_eq!(any.len(), 3001);
            let matched = chain.matches(&r);
            (deep, nots, both, matched)
        });
        assert!(deep);
        assert!(nots); // an even number of NOTs
        // Innermost, NOT (x OR Samsung) holds; each level out negates (x OR the level below).
        assert!(!both);
        assert!(chain);
    }

    #[test]
    fn oversized_filters_are_refused() {
        let long = "brand:x OR ".repeat(MAX_FILTERS_BYTES / 11 + 1) + "brand:y";
        assert_eq!(
            error(&long),
            format!(
                "filters: {} bytes, the limit is {MAX_FILTERS_BYTES}",
                long.len()
            )
        );
        let many: Vec<Value> = (0..MAX_LIST_FILTERS)
            .map(|i| json!(format!("a:{i}")))
            .collect();
        assert!(Filter::parse(None, Some(&Value::Array(many.clone())), None).is_ok());
        // An inner list's elements count one by one.
        let nest = |all: &[Value]| {
            let mut outer = all[..600].to_vec();
            outer.push(Value::Array(all[600..].to_vec()));
            Value::Array(outer)
        };
        assert!(Filter::parse(None, Some(&nest(&many)), None).is_ok());
        let mut over = many;
        over.push(json!("a:x"));
        for value in [nest(&over), Value::Array(over)] {
            assert_eq!(
                Filter::parse(None, Some(&value), None).unwrap_err().0,
                format!("facetFilters: 1001 filters, the limit is {MAX_LIST_FILTERS}")
            );
        }
        let numeric = json!(vec!["price > 1"; MAX_LIST_FILTERS + 1]);
        assert!(
            Filter::parse(None, None, Some(&numeric))
                .unwrap_err()
                .0
                .starts_with("numericFilters: 1001 filters")
        );
    }

    /// The test's own filter tree, rendered to text and evaluated directly.
    #[derive(Debug, Clone)]
    enum Ast {
        And(Vec<Ast>),
        Or(Vec<Ast>),
        Not(Box<Ast>),
        Facet(&'static str, &'static str),
        Cmp(&'static str, &'static str, f64),
        Range(&'static str, f64, f64),
    }

    const STRINGS: [&str; 5] = ["Apple", "apple", "Samsung", "Hello Kitty", "x"];
    const NUMBERS: [f64; 5] = [-2.0, 0.0, 1.5, 3.0, 10.0];
    const OPS: [&str; 6] = ["<", "<=", "=", "!=", ">=", ">"];

    fn render(ast: &Ast) -> String {
        let value = |v: &str| {
            if v.contains(' ') {
                format!("\"{v}\"")
            } else {
                v.to_owned()
            }
        };
        match ast {
            Ast::And(all) => all
                .iter()
                .map(|a| format!("({})", render(a)))
                .collect::<Vec<_>>()
                .join(" AND "),
            Ast::Or(any) => any
                .iter()
                .map(|a| format!("({})", render(a)))
                .collect::<Vec<_>>()
                .join(" OR "),
            Ast::Not(a) => format!("NOT ({})", render(a)),
            Ast::Facet(attr, v) => format!("{attr}:{}", value(v)),
            Ast::Cmp(attr, op, x) => format!("{attr} {op} {x}"),
            Ast::Range(attr, lo, hi) => format!("{attr}:{lo} TO {hi}"),
        }
    }

    /// Each attribute's values as plain Rust, evaluated without the module's code.
    fn naive(ast: &Ast, r: &Map<String, Value>) -> bool {
        let strings = |attr: &str| -> Vec<String> {
            let v = match attr {
                "cat.lvl0" => r.get("cat").and_then(|c| c.get("lvl0")),
                _ => r.get(attr),
            };
            match v {
                Some(Value::String(s)) => vec![s.to_lowercase()],
                Some(Value::Array(items)) => items
                    .iter()
                    .filter_map(|i| i.as_str())
                    .map(str::to_lowercase)
                    .collect(),
                Some(Value::Bool(b)) => vec![b.to_string()],
                _ => vec![],
            }
        };
        let numbers =
            |attr: &str| -> Vec<f64> { r.get(attr).and_then(Value::as_f64).into_iter().collect() };
        match ast {
            Ast::And(all) => all.iter().all(|a| naive(a, r)),
            Ast::Or(any) => any.iter().any(|a| naive(a, r)),
            Ast::Not(a) => !naive(a, r),
            Ast::Facet("price", v) => numbers("price")
                .iter()
                .any(|x| v.parse::<f64>().ok() == Some(*x)),
            Ast::Facet(attr, v) => strings(attr).contains(&v.to_lowercase()),
            Ast::Cmp(attr, "!=", x) => !numbers(attr).contains(x),
            Ast::Cmp(attr, op, x) => numbers(attr).iter().any(|y| match *op {
                "<" => y < x,
                "<=" => y <= x,
                "=" => y == x,
                ">=" => y >= x,
                _ => y > x,
            }),
            Ast::Range(attr, lo, hi) => numbers(attr).iter().any(|y| lo <= y && y <= hi),
        }
    }

    fn leaf() -> impl Strategy<Value = Ast> {
        prop_oneof![
            (
                prop::sample::select(vec!["brand", "tags", "cat.lvl0", "inStock"]),
                prop::sample::select(STRINGS.to_vec())
            )
                .prop_map(|(a, v)| Ast::Facet(
                    a,
                    if a == "inStock" {
                        if v.len() % 2 == 0 { "true" } else { "false" }
                    } else {
                        v
                    }
                )),
            (
                prop::sample::select(OPS.to_vec()),
                prop::sample::select(NUMBERS.to_vec())
            )
                .prop_map(|(op, x)| Ast::Cmp("price", op, x)),
            (
                prop::sample::select(NUMBERS.to_vec()),
                prop::sample::select(NUMBERS.to_vec())
            )
                .prop_map(|(a, b)| Ast::Range("price", a.min(b), a.max(b))),
        ]
    }

    fn tree() -> impl Strategy<Value = Ast> {
        leaf().prop_recursive(4, 24, 3, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 2..4).prop_map(Ast::And),
                prop::collection::vec(inner.clone(), 2..4).prop_map(Ast::Or),
                inner.prop_map(|a| Ast::Not(Box::new(a))),
            ]
        })
    }

    fn records() -> impl Strategy<Value = Vec<Map<String, Value>>> {
        let one = (
            prop::option::of(prop::sample::select(STRINGS.to_vec())),
            prop::option::of(prop::sample::select(NUMBERS.to_vec())),
            prop::collection::vec(prop::sample::select(STRINGS.to_vec()), 0..3),
            prop::option::of(any::<bool>()),
            prop::option::of(prop::sample::select(STRINGS.to_vec())),
        )
            .prop_map(|(brand, price, tags, in_stock, cat)| {
                let mut r = Map::new();
                if let Some(b) = brand {
                    r.insert("brand".into(), json!(b));
                }
                if let Some(p) = price {
                    r.insert("price".into(), json!(p));
                }
                r.insert("tags".into(), json!(tags));
                if let Some(s) = in_stock {
                    r.insert("inStock".into(), json!(s));
                }
                if let Some(c) = cat {
                    r.insert("cat".into(), json!({"lvl0": c}));
                }
                r
            });
        prop::collection::vec(one, 8)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn parsed_filters_match_a_naive_evaluation(ast in tree(), records in records()) {
            let text = render(&ast);
            let filter = Filter::parse(Some(&text), None, None).unwrap().unwrap();
            for r in &records {
                prop_assert_eq!(filter.matches(r), naive(&ast, r), "{} on {:?}", text, r);
            }
        }

        #[test]
        fn facet_filter_lists_match_a_naive_evaluation(
            groups in prop::collection::vec(
                prop::collection::vec((any::<bool>(), prop::sample::select(vec!["brand", "tags"]),
                                       prop::sample::select(STRINGS.to_vec())), 1..3), 1..4),
            records in records(),
        ) {
            let as_json: Vec<Value> = groups.iter().map(|g| {
                json!(g.iter().map(|(neg, a, v)| format!("{a}:{}{v}", if *neg { "-" } else { "" }))
                    .collect::<Vec<_>>())
            }).collect();
            let ast = Ast::And(groups.iter().map(|g| Ast::Or(g.iter().map(|(neg, a, v)| {
                let facet = Ast::Facet(a, v);
                if *neg { Ast::Not(Box::new(facet)) } else { facet }
            }).collect())).collect());
            let filter = Filter::parse(None, Some(&Value::Array(as_json)), None).unwrap().unwrap();
            for r in &records {
                prop_assert_eq!(filter.matches(r), naive(&ast, r));
            }
        }
    }
}
