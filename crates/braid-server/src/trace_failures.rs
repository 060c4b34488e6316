//! Which answers the HTTP trace layer logs as failures: every 5xx but the 503s a server gives
//! by design while it loads its model and calibrates, or while it drains. Those are expected
//! (a load balancer or a test harness polls `/health` through every start), and one warning
//! per poll buried the log lines that mattered. A 503 that reports a fault (`/health`'s
//! `engine_stopped` or `engine_stalled`) stays a warning.

use axum::http::Response;
use std::fmt;
use tower_http::classify::{
    ClassifiedResponse, ClassifyResponse, NeverClassifyEos, ServerErrorsAsFailures,
    ServerErrorsFailureClass,
};

/// Put on a response that is unavailable on purpose (loading or draining).
#[derive(Clone, Copy, Debug)]
pub struct UnavailableByDesign;

/// Marks `resp` [`UnavailableByDesign`] when `reason` (an API error's `code`, `/health`'s
/// `status`) is one a server gives on purpose: `loading` or `draining`.
pub fn mark_if_by_design<B>(resp: &mut Response<B>, reason: &str) {
    if matches!(reason, "loading" | "draining") {
        resp.extensions_mut().insert(UnavailableByDesign);
    }
}

/// [`ServerErrorsAsFailures`], except for responses marked [`UnavailableByDesign`].
#[derive(Clone, Copy, Debug, Default)]
pub struct UnplannedServerErrors;

impl ClassifyResponse for UnplannedServerErrors {
    type FailureClass = ServerErrorsFailureClass;
    type ClassifyEos = NeverClassifyEos<ServerErrorsFailureClass>;

    fn classify_response<B>(
        self,
        res: &Response<B>,
    ) -> ClassifiedResponse<Self::FailureClass, Self::ClassifyEos> {
        if res.extensions().get::<UnavailableByDesign>().is_some() {
            return ClassifiedResponse::Ready(Ok(()));
        }
        ServerErrorsAsFailures::new().classify_response(res)
    }

    fn classify_error<E: fmt::Display + 'static>(self, error: &E) -> Self::FailureClass {
        ServerErrorsAsFailures::new().classify_error(error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::StatusCode;

    fn is_failure(res: Response<()>) -> bool {
        match UnplannedServerErrors.classify_response(&res) {
            ClassifiedResponse::Ready(r) => r.is_err(),
            ClassifiedResponse::RequiresEos(_) => unreachable!("classified at the head"),
        }
    }

    fn status(code: StatusCode) -> Response<()> {
        let mut res = Response::new(());
        *res.status_mut() = code;
        res
    }

    #[test]
    fn only_unplanned_server_errors_are_failures() {
        assert!(is_failure(status(StatusCode::SERVICE_UNAVAILABLE)));
        assert!(is_failure(status(StatusCode::INTERNAL_SERVER_ERROR)));
        assert!(!is_failure(status(StatusCode::BAD_REQUEST)));
        let mut planned = status(StatusCode::SERVICE_UNAVAILABLE);
        planned.extensions_mut().insert(UnavailableByDesign);
        assert!(!is_failure(planned));
    }
}
