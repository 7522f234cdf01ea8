//! A client certificate's identity (CN, O) from any DER.
#![no_main]
use kubegate_wire::identity::CertIdentity;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = CertIdentity::from_der(data);
});
