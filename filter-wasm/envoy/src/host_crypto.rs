//! ES256 proofs through Envoy's own BoringSSL: the foreign function `verify_signature`, called
//! with the arguments the core writes ([`filter_core::dpop::host`]). Whether a VM uses it is
//! decided once, at its first configuration, by the core's known-answer check.
//!
//! The call is made through the ABI's `proxy_call_foreign_function` directly rather than the
//! SDK's wrapper, which panics on a status it does not expect: whatever this host answers, the
//! VM keeps running and decides on its own code.

use filter_core::dpop::host::{host_answers_rightly, ForeignCall, HostEs256, VERIFY_SIGNATURE};

#[link(wasm_import_module = "env")]
extern "C" {
    fn proxy_call_foreign_function(
        function_name_data: *const u8,
        function_name_size: usize,
        arguments_data: *const u8,
        arguments_size: usize,
        results_data: *mut *mut u8,
        results_size: *mut usize,
    ) -> u32;
}

/// The host's `verify_signature`.
pub struct Envoy;

impl ForeignCall for Envoy {
    fn verify_signature(&self, arguments: &[u8]) -> Option<Vec<u8>> {
        let mut data: *mut u8 = core::ptr::null_mut();
        let mut size: usize = 0;
        // SAFETY: the pointers are to live locals and slices for the length given; on `Ok` the
        // host has put its answer in memory it got from this module's allocator
        // (`proxy_on_memory_allocate`, a `Vec<u8>` of exactly `size` bytes), which the `Vec`
        // made here takes over, as the SDK's own wrapper does.
        let status = unsafe {
            proxy_call_foreign_function(
                VERIFY_SIGNATURE.as_ptr(),
                VERIFY_SIGNATURE.len(),
                arguments.as_ptr(),
                arguments.len(),
                &mut data,
                &mut size,
            )
        };
        match status {
            0 if data.is_null() => Some(Vec::new()),
            // SAFETY: see above.
            0 => Some(unsafe { Vec::from_raw_parts(data, size, size) }),
            _ => None,
        }
    }
}

/// The host's verifier, handed to the core once it answered rightly.
pub static HOST: HostEs256<Envoy> = HostEs256(Envoy);

/// Whether this host verifies ES256 as the module does (asked once per VM).
pub fn host_verifies() -> bool {
    host_answers_rightly(&HOST)
}
