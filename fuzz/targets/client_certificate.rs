//! A client certificate's identity (CN, O) from any DER.
use kubegate_wire::identity::UserInfo;

/// Runs one input: panics where a property does not hold.
pub fn run(data: &[u8]) {
    let _ = UserInfo::from_der(data);
}
