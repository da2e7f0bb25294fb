//! Decoding arbitrary bytes as a Bloom filter returns an error or a filter, never panics; what
//! decodes encodes back to the same bytes.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(filter) = penchant_bloom::BloomFilter::from_bytes(data) {
        assert_eq!(filter.to_bytes(), data);
        let _ = filter.contains(data);
        let _ = filter.estimated_fp_rate();
        let _ = filter.estimated_count();
    }
});
