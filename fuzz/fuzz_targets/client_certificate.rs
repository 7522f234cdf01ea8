//! A client certificate's identity (CN, O) from any DER.
#![no_main]
use kubegate_wire::identity::UserInfo;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = UserInfo::from_der(data);
});
