//! The value classes' own JS API: `Timestamp`, `GeoPoint`, `Bytes` and `FieldValue`
//! methods, with Firestore's range errors.

use super::*;

// ---------------------------------------------------------------------------------------------
// The classes' JS API

#[wasm_bindgen_test]
fn timestamp_api() {
    let r = js("const t = Timestamp.fromMillis(1546350323010);
        const u = Timestamp.fromMillis(t.toMillis());
        return [t.seconds === 1546350323, t.nanoseconds === 10000000, t.toMillis() === 1546350323010,
                u.isEqual(t), !t.isEqual(Timestamp.fromMillis(1546350323011)), !t.isEqual({ seconds: 1546350323, nanoseconds: 10000000 }),
                t.toDate().getTime() === 1546350323010,
                Timestamp.fromDate(new Date(1546350323010)).isEqual(t),
                String(t) === 'Timestamp(seconds=1546350323, nanoseconds=10000000)',
                JSON.stringify(t) === '{\"seconds\":1546350323,\"nanoseconds\":10000000,\"type\":\"firestore/timestamp/1.0\"}',
                Math.abs(Timestamp.now().toMillis() - Date.now()) < 5000,
                new Timestamp(1, 123456789).nanoseconds === 123456000,
                Timestamp.fromMillis(1.5).nanoseconds === 1500000,
                Timestamp.fromMillis(-1).seconds === -1 && Timestamp.fromMillis(-1).nanoseconds === 999000000,
                Timestamp.fromMillis(-1).toMillis() === -1,
                new Timestamp(-62135596800, 0).seconds === -62135596800,
                new Timestamp(253402300799, 999999999).nanoseconds === 999999000,
        ].join();");
    assert_eq!(r.as_string().unwrap(), ["true"; 17].join(","));

    // valueOf makes <, > and sorting follow time, as with Firestore's Timestamp.
    let r = js(
        "const ms = [5, -1000001, 0, 1546350323010, -62135596800000, 253402300799999, -1, 1];
        const ts = ms.map(m => Timestamp.fromMillis(m));
        const byValue = [...ts].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0)).map(t => t.toMillis());
        const byNumber = [...ms].sort((a, b) => a - b);
        return [JSON.stringify(byValue) === JSON.stringify(byNumber),
                Timestamp.fromMillis(1) > Timestamp.fromMillis(0),
                new Timestamp(0, 1000) > new Timestamp(0, 0),
                new Timestamp(1, 0) > new Timestamp(0, 999999000),
                Timestamp.fromMillis(0).valueOf()].join();",
    );
    assert_eq!(
        r.as_string().unwrap(),
        "true,true,true,true,062135596800.000000000"
    );

    // The seed's merge sort reads aT.seconds and aT.nanoseconds from data().
    let docs = Array::new();
    for ms in [
        1_546_350_323_010.0,
        1_546_350_323_101.0,
        1_546_350_323_001.0,
    ] {
        let mut m = Map::new();
        m.insert(
            "timestamp".into(),
            Value::Timestamp(hearth::client::types::timestamp_from_millis(ms).unwrap()),
        );
        docs.push(&map_to_js(&m));
    }
    let order = with_x(
        &docs,
        "x.sort((a, b) => {
            const aT = a.timestamp; const bT = b.timestamp;
            const secondsDiff = aT.seconds - bT.seconds;
            if (secondsDiff === 0) { return -(aT.nanoseconds - bT.nanoseconds); } else { return -secondsDiff; }
         });
         return x.map(d => d.timestamp.toMillis() % 1000).join();",
    );
    assert_eq!(order.as_string().unwrap(), "101,10,1");

    for (src, msg) in [
        (
            "new Timestamp(253402300800, 0)",
            "Timestamp seconds out of range: 253402300800",
        ),
        (
            "new Timestamp(-62135596801, 0)",
            "Timestamp seconds out of range: -62135596801",
        ),
        (
            "new Timestamp(0, 1e9)",
            "Timestamp nanoseconds out of range: 1000000000",
        ),
        (
            "new Timestamp(0, -1)",
            "Timestamp nanoseconds out of range: -1",
        ),
        (
            "new Timestamp(1.5, 0)",
            "Timestamp seconds must be an integer, but was: 1.5",
        ),
        (
            "Timestamp.fromMillis(NaN)",
            "Timestamp milliseconds must be a finite number",
        ),
        (
            "Timestamp.fromMillis(1e20)",
            "Timestamp seconds out of range: 100000000000000000",
        ),
        (
            "Timestamp.fromDate('2019')",
            "Timestamp.fromDate() requires a Date",
        ),
    ] {
        let (m, code) = thrown(&js_throws(&format!("return {src};")));
        assert_eq!(code, "invalid-argument", "{src}");
        assert!(m.starts_with(msg), "{src}: {m}");
    }
}

#[wasm_bindgen_test]
fn geopoint_api_and_range_errors() {
    let r = js("const g = new GeoPoint(51.5, -0.12);
        return [g.latitude, g.longitude, g.isEqual(new GeoPoint(51.5, -0.12)), g.isEqual(new GeoPoint(51.5, 0)),
                JSON.stringify(g), new GeoPoint(-90, 180).latitude, new GeoPoint(90, -180).longitude].join(';');");
    assert_eq!(
        r.as_string().unwrap(),
        "51.5;-0.12;true;false;{\"latitude\":51.5,\"longitude\":-0.12,\"type\":\"firestore/geoPoint/1.0\"};-90;-180"
    );
    for (src, msg) in [
        (
            "new GeoPoint(91, 0)",
            "Latitude must be a number between -90 and 90, but was: 91",
        ),
        (
            "new GeoPoint(-90.5, 0)",
            "Latitude must be a number between -90 and 90, but was: -90.5",
        ),
        (
            "new GeoPoint(0, 180.01)",
            "Longitude must be a number between -180 and 180, but was: 180.01",
        ),
        (
            "new GeoPoint(NaN, 0)",
            "Latitude must be a number between -90 and 90, but was: NaN",
        ),
        (
            "new GeoPoint(0, -Infinity)",
            "Longitude must be a number between -180 and 180, but was: -Infinity",
        ),
    ] {
        let (m, code) = thrown(&js_throws(&format!("return {src};")));
        assert_eq!(
            (m.as_str(), code.as_str()),
            (msg, "invalid-argument"),
            "{src}"
        );
    }
}

#[wasm_bindgen_test]
fn bytes_api() {
    let r = js("const b = Bytes.fromUint8Array(new Uint8Array([104, 101, 108, 108, 111]));
        const lens = [];
        for (let n = 0; n < 12; n++) {
            const raw = new Uint8Array(n).map((_, i) => (i * 97 + 13) & 255);
            const back = Bytes.fromBase64String(Bytes.fromUint8Array(raw).toBase64()).toUint8Array();
            lens.push(back.length === n && back.every((v, i) => v === raw[i]) && Bytes.fromUint8Array(raw).toBase64() === btoa(String.fromCharCode(...raw)));
        }
        const u = b.toUint8Array(); u[0] = 0;
        return [b.toBase64(), String(b), b.isEqual(Bytes.fromBase64String('aGVsbG8')), b.isEqual(Bytes.fromBase64String('aGVsbA==')),
                lens.every(x => x), b.toUint8Array()[0], Bytes.fromBase64String(' aGVs\\nbG8= ').toBase64()].join(';');");
    assert_eq!(
        r.as_string().unwrap(),
        "aGVsbG8=;Bytes(base64: aGVsbG8=);true;false;true;104;aGVsbG8="
    );
    for (src, msg) in [
        (
            "Bytes.fromBase64String('a')",
            "Failed to construct data from Base64 string",
        ),
        (
            "Bytes.fromBase64String('ab!c')",
            "Failed to construct data from Base64 string",
        ),
        (
            "Bytes.fromUint8Array([1, 2])",
            "Bytes.fromUint8Array() requires a Uint8Array",
        ),
        (
            "Bytes.fromBase64String(5)",
            "Bytes.fromBase64String() requires a string",
        ),
    ] {
        let (m, code) = thrown(&js_throws(&format!("return {src};")));
        assert_eq!(code, "invalid-argument", "{src}");
        assert!(m.starts_with(msg), "{src}: {m}");
    }
}

#[wasm_bindgen_test]
fn field_value_api() {
    let r = js("return [
            FieldValue.delete().isEqual(FieldValue.delete()),
            FieldValue.delete().isEqual(FieldValue.serverTimestamp()),
            FieldValue.serverTimestamp().isEqual(FieldValue.serverTimestamp()),
            FieldValue.increment(1).isEqual(FieldValue.increment(1)),
            FieldValue.increment(1).isEqual(FieldValue.increment(2)),
            FieldValue.increment(1).isEqual(FieldValue.increment(1.5)),
            FieldValue.arrayUnion(1, 'a', { b: 2 }).isEqual(FieldValue.arrayUnion(1, 'a', { b: 2 })),
            FieldValue.arrayUnion(1).isEqual(FieldValue.arrayRemove(1)),
            FieldValue.arrayRemove(1, 2).isEqual(FieldValue.arrayRemove(2, 1)),
            FieldValue.increment(1).isEqual(1),
        ].join();");
    assert_eq!(
        r.as_string().unwrap(),
        "true,false,true,true,false,false,true,false,false,false"
    );
    let (m, code) = thrown(&js_throws("return FieldValue.increment('1');"));
    assert_eq!(
        (m.as_str(), code.as_str()),
        (
            "FieldValue.increment() requires a number, but it was: \"1\"",
            "invalid-argument"
        )
    );
}
