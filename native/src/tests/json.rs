//! The JSON parser (`crate::json`): what RFC 8259 refuses is refused, at the byte where it goes
//! wrong; what it allows is read as DuckDB reads it.  A slice of a JSON document is cut where a
//! parse succeeds, so a lenient parser would cut in the wrong place.

use super::{options, stage_with, OBJECT};
use crate::event::Records;
use crate::json::{minified, parse, str_f64, str_i64, Doc, Tok};

fn doc(text: &str) -> (Vec<Tok>, usize) {
    let mut tape = Vec::new();
    let end = parse(text.as_bytes(), 0, &mut tape).unwrap();
    (tape, end)
}

/// (position, message) of the parser's refusal of `text`.
fn refusal(text: &str) -> (usize, &'static str) {
    let mut tape = Vec::new();
    let e = parse(text.as_bytes(), 0, &mut tape).expect_err(text);
    (e.pos, e.what)
}

#[test]
fn parses_and_navigates() {
    let text = r#" {"a": [1, 2.5, "x"], "b": {"c": null, "d": true}, "e": "\u00e9\n"} "#;
    let (tape, end) = doc(text);
    assert_eq!(end, text.len() - 1);
    let d = Doc { buf: text.as_bytes(), tape: &tape };
    let a = d.get(Some(0), "a");
    let items: Vec<_> = d.elements(a).collect();
    assert_eq!(items.len(), 3);
    assert_eq!(d.i64(items[0]), Some(1));
    assert_eq!(d.f64(items[1]), Some(2.5));
    assert_eq!(d.i64(items[1]), Some(2));
    assert_eq!(d.text(items[2]).as_deref(), Some("x"));
    let b = d.get(Some(0), "b");
    assert_eq!(d.text(d.get(b, "c").unwrap()), None);
    assert_eq!(d.boolean(d.get(b, "d").unwrap()), Some(true));
    assert_eq!(d.text(d.get(Some(0), "e").unwrap()).as_deref(), Some("é\n"));
    assert_eq!(d.get(Some(0), "z"), None);
    assert_eq!(d.text(b.unwrap()).as_deref(), Some(r#"{"c":null,"d":true}"#));
}

#[test]
fn refuses_what_rfc_8259_refuses() {
    for bad in ["[1,]", "{\"a\":1,}", "[01]", "[1.]", "[.5]", "[\"a\u{1}\"]", "[\"\\x\"]", "{a:1}", "[nul]",
                "[1 2]", "{\"a\" 1}", "[", "\"abc", "[-]", "[1e]", "[NaN]"] {
        let mut tape = Vec::new();
        assert!(parse(bad.as_bytes(), 0, &mut tape).is_err(), "{bad}");
    }
}

#[test]
fn conversions_follow_duckdb() {
    assert_eq!(str_i64("2.5"), Some(3));
    assert_eq!(str_i64("0x10"), Some(16));
    assert_eq!(str_i64(" 7 "), Some(7));
    assert_eq!(str_i64("abc"), None);
    assert_eq!(str_f64(" 7 "), Some(7.0));
    assert_eq!(str_f64(""), None);
    let (tape, _) = doc("[2.5, 3.5, -2.5, 9223372036854775808, 1e3, \"296\"]");
    let d = Doc { buf: b"[2.5, 3.5, -2.5, 9223372036854775808, 1e3, \"296\"]", tape: &tape };
    let v: Vec<_> = d.elements(Some(0)).map(|i| d.i64(i)).collect();
    assert_eq!(v, vec![Some(2), Some(4), Some(-2), None, Some(1000), Some(296)]);
}

#[test]
fn minifies_outside_strings() {
    assert_eq!(minified(br#"{ "a" : [1, "b c", "\" x"] }"#), r#"{"a":[1,"b c","\" x"]}"#);
}

#[test]
fn a_trailing_comma_is_refused_where_the_next_value_should_be() {
    // RFC 8259 §5: "values are separated by value-separator" — nothing after the last
    assert_eq!(refusal("[1,]"), (3, "expected a JSON value"));
    assert_eq!(refusal("[1, 2 , ]"), (8, "expected a JSON value"));
    assert_eq!(refusal("[[1],]"), (5, "expected a JSON value"));
    // §4: "name-separator" members: after a comma comes a string key
    assert_eq!(refusal(r#"{"a":1,}"#), (7, "expected a string key"));
    assert_eq!(refusal(r#"{"a":1, }"#), (8, "expected a string key"));
}

#[test]
fn a_control_character_in_a_string_is_refused_where_it_is() {
    // §7: "All Unicode characters may be placed within the quotation marks, except for the
    // characters that MUST be escaped: quotation mark, reverse solidus, and the control
    // characters (U+0000 through U+001F)."
    assert_eq!(refusal("[\"a\u{1}b\"]"), (3, "control character in string"));
    assert_eq!(refusal("\"a\tb\""), (2, "control character in string"));
    assert_eq!(refusal("\"\u{0}\""), (1, "control character in string"));
    // (past the first eight bytes, where the scan goes a word at a time)
    assert_eq!(refusal("\"abcdefghij\nk\""), (11, "control character in string"));
    assert_eq!(refusal("\"abcdefghijklmnopq\u{1f}\""), (18, "control character in string"));
    // DEL and anything beyond ASCII are allowed as they are
    let (_, end) = doc("\"\u{7f}é€😀 abcdefgh\"");
    assert_eq!(end, "\"\u{7f}é€😀 abcdefgh\"".len());
}

#[test]
fn a_bad_escape_is_refused_at_its_backslash() {
    assert_eq!(refusal(r#""\x""#), (1, "invalid escape in string"));
    assert_eq!(refusal(r#"["ok", "a\'"]"#), (9, "invalid escape in string"));
    assert_eq!(refusal(r#"["\u12G4"]"#), (2, "invalid \\u escape in string"));
    assert_eq!(refusal(r#""\u12""#), (1, "invalid \\u escape in string"));
    // a backslash at the very end leaves the string open: refused at its quote
    assert_eq!(refusal("\"abc\\"), (0, "unterminated string"));
    // the eight escapes §7 allows, and \u with a surrogate pair
    let text = r#""\" \\ \/ \b \f \n \r \t \u00e9 \ud83d\ude00""#;
    let (tape, end) = doc(text);
    assert_eq!(end, text.len());
    let d = Doc { buf: text.as_bytes(), tape: &tape };
    assert_eq!(d.text(0).as_deref(), Some("\" \\ / \u{8} \u{c} \n \r \t é 😀"));
}

#[test]
fn numbers_are_refused_unless_the_grammar_allows_them() {
    // §6: "int = zero / ( digit1-9 *DIGIT )": no leading zeros, so "01" is 0 then a stray 1
    assert_eq!(refusal("[01]"), (2, "expected ',' or ']'"));
    assert_eq!(refusal("[-01]"), (3, "expected ',' or ']'"));
    assert_eq!(refusal("[0x10]"), (2, "expected ',' or ']'"));
    // a fraction and an exponent need a digit; a minus needs a number; no plus sign, no bare dot
    assert_eq!(refusal("[1.]"), (1, "invalid number"));
    assert_eq!(refusal("[1.e5]"), (1, "invalid number"));
    assert_eq!(refusal("[1e]"), (1, "invalid number"));
    assert_eq!(refusal("[1e+]"), (1, "invalid number"));
    assert_eq!(refusal("[-]"), (1, "invalid number"));
    assert_eq!(refusal("[- 1]"), (1, "invalid number"));
    assert_eq!(refusal("[.5]"), (1, "expected a JSON value"));
    assert_eq!(refusal("[+1]"), (1, "expected a JSON value"));
    assert_eq!(refusal("[NaN]"), (1, "expected a JSON value"));
    assert_eq!(refusal("[Infinity]"), (1, "expected a JSON value"));
}

#[test]
fn numbers_the_grammar_allows_are_read() {
    let text = "[0, -0, 0.5, 1E+2, -1.5e-3, 0e0, 10, 123456789012]";
    let (tape, end) = doc(text);
    assert_eq!(end, text.len());
    let d = Doc { buf: text.as_bytes(), tape: &tape };
    let v: Vec<_> = d.elements(Some(0)).map(|i| d.f64(i)).collect();
    assert_eq!(v, [0.0, -0.0, 0.5, 100.0, -0.0015, 0.0, 10.0, 123456789012.0].map(Some));
}

#[test]
fn an_unclosed_container_or_string_is_refused() {
    assert_eq!(refusal("[1, 2"), (5, "unexpected end of input"));
    assert_eq!(refusal(r#"{"a": [1"#), (8, "unexpected end of input"));
    assert_eq!(refusal(r#"{"a":"#), (5, "unexpected end of input"));
    assert_eq!(refusal("["), (1, "unexpected end of input"));
    assert_eq!(refusal("  "), (2, "unexpected end of input"));
    assert_eq!(refusal(r#"["abc"#), (1, "unterminated string"));
    // closed by the wrong bracket
    assert_eq!(refusal("[1}"), (2, "expected ',' or ']'"));
    assert_eq!(refusal(r#"{"a":1]"#), (6, "expected ',' or '}'"));
}

#[test]
fn keys_and_literals_are_refused_when_misspelt() {
    assert_eq!(refusal("{a:1}"), (1, "expected a string key"));
    assert_eq!(refusal(r#"{"a" 1}"#), (5, "expected ':'"));
    assert_eq!(refusal(r#"{"a""#), (4, "expected ':'"));
    assert_eq!(refusal("[nul]"), (1, "invalid literal"));
    assert_eq!(refusal("[True]"), (1, "expected a JSON value"));
    assert_eq!(refusal("[nulll]"), (5, "expected ',' or ']'"));
    assert_eq!(refusal("[1 2]"), (3, "expected ',' or ']'"));
}

#[test]
fn invalid_utf8_is_refused_before_any_parse_at_its_first_byte() {
    // §8.1: "JSON text exchanged between systems that are not part of a closed ecosystem MUST be
    // encoded using UTF-8"; the slice is checked once, where it starts to be invalid
    let opts = options(Records::Lines, OBJECT);
    for (bytes, at) in [
        (&b"{\"name\":\"a\xffb\"}\n"[..], 10),
        (&b"{\"name\":\"x\"}\n{\"name\":\"\xc0\xaf\"}\n"[..], 22), // overlong '/'
        (&b"\"\xed\xa0\x80\""[..], 1),                              // a UTF-16 surrogate
        (&b"{\"name\":\"\xc3"[..], 9),                               // cut inside a character
    ] {
        let e = stage_with(bytes, &opts).err().expect("refused");
        assert_eq!((e.pos, e.record, e.what.as_str()), (at, 0, "invalid UTF-8"), "{bytes:?}");
    }
}

#[test]
fn a_refused_record_is_reported_with_its_number_and_its_byte_in_the_slice() {
    let opts = options(Records::Lines, OBJECT);
    let text = "{\"time\":1,\"name\":\"a\"}\n\n{\"time\":2,\"name\":\"b\",}\n";
    let e = stage_with(text.as_bytes(), &opts).err().expect("refused");
    assert_eq!((e.pos, e.record, e.what.as_str()), (text.find(",}").unwrap() + 1, 2, "expected a string key"));
    // JSON-SEQ: each record after a record separator
    let text = "\u{1e}{\"name\":\"a\"}\n\u{1e}{\"name\":\"b\"\n";
    let e = stage_with(text.as_bytes(), &opts).err().expect("refused");
    assert_eq!((e.pos, e.record, e.what.as_str()), (text.len() - 1, 2, "unexpected end of input"));
    // two values on a line are not one record
    let e = stage_with(b"{\"name\":\"a\"} x\n", &opts).err().expect("refused");
    assert_eq!((e.pos, e.record, e.what.as_str()), (12, 1, "characters after the record"));
}

#[test]
fn an_array_of_events_is_refused_where_it_goes_wrong() {
    let array = options(Records::Array, OBJECT);
    let e = stage_with(br#"[{"name":"a"},]"#, &array).err().expect("refused");
    assert_eq!((e.pos, e.record, e.what.as_str()), (14, 2, "expected a JSON value"));
    let e = stage_with(br#"[{"name":"a"}"#, &array).err().expect("refused");
    assert_eq!((e.pos, e.record, e.what.as_str()), (13, 1, "expected ',' or ']'"));
    let e = stage_with(br#"{"name":"a"}"#, &array).err().expect("refused");
    assert_eq!((e.pos, e.record, e.what.as_str()), (0, 0, "expected '['"));
    let e = stage_with(b"[] x", &array).err().expect("refused");
    assert_eq!((e.pos, e.what.as_str()), (2, "characters after the array"));
    // a stretch of a document's events array, without brackets: a cut after a comma is refused
    let elements = options(Records::Elements, OBJECT);
    let e = stage_with(br#"{"name":"a"},"#, &elements).err().expect("refused");
    assert_eq!((e.pos, e.record, e.what.as_str()), (13, 2, "unexpected end of input"));
    assert_eq!(stage_with(br#" {"name":"a"} , {"name":"b"} "#, &elements).expect("stages").events.len(), 2);
}
