//! One server's time in an attempt: [`Directory::timeout`](super::Directory) in all for the
//! operations asked of it (with the waits for its connections), spent one operation after
//! another. Whatever the caller does between them (the bind guard's count in the issuer's store)
//! is not spent. Once nothing is left, no operation is started (a slow wait inside one operation,
//! for a connection, can still leave its request little time).

use super::Step;
use std::future::Future;
use std::time::Duration;

pub(super) struct Budget {
    whole: Duration,
    left: Duration,
}

impl Budget {
    pub(super) fn new(whole: Duration) -> Self {
        Self { whole, left: whole }
    }

    /// `op` within what is left: its error is the server's failure, and so is the time running
    /// out.
    pub(super) async fn spend<T, E>(
        &mut self,
        op: impl Future<Output = Result<T, E>>,
    ) -> Result<T, Step>
    where
        Step: From<E>,
    {
        self.within(op).await?.map_err(Step::from)
    }

    /// What `op` came back with, or the server's failure when the time ran out first (`op` not
    /// started at all when none was left).
    pub(super) async fn within<T>(&mut self, op: impl Future<Output = T>) -> Result<T, Step> {
        if self.left.is_zero() {
            return Err(self.ran_out());
        }
        let started = tokio::time::Instant::now();
        let done = tokio::time::timeout(self.left, op).await;
        self.left = self.left.saturating_sub(started.elapsed());
        done.map_err(|_| self.ran_out())
    }

    fn ran_out(&self) -> Step {
        let ms = self.whole.as_millis();
        Step::Failed(format!("no answer within {ms} ms"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::time::sleep;

    const WHOLE: Duration = Duration::from_millis(1000);

    /// An operation that answers after `ms` milliseconds.
    async fn answers_after(ms: u64) -> Result<u64, Step> {
        sleep(Duration::from_millis(ms)).await;
        Ok(ms)
    }

    fn ran_out<T>(r: &Result<T, Step>) -> bool {
        matches!(r, Err(Step::Failed(why)) if why == "no answer within 1000 ms")
    }

    #[tokio::test(start_paused = true)]
    async fn operations_share_one_timeout() {
        let mut b = Budget::new(WHOLE);
        assert_eq!(b.spend(answers_after(600)).await.ok(), Some(600));
        let second = b.spend(answers_after(600)).await;
        assert!(ran_out(&second), "600 ms after 600 ms of 1000");
    }

    #[tokio::test(start_paused = true)]
    async fn time_between_operations_is_not_spent() {
        let mut b = Budget::new(WHOLE);
        assert!(b.spend(answers_after(400)).await.is_ok());
        sleep(Duration::from_secs(5)).await;
        assert_eq!(b.spend(answers_after(500)).await.ok(), Some(500));
    }

    #[tokio::test(start_paused = true)]
    async fn nothing_is_started_once_the_time_is_spent() {
        let mut b = Budget::new(WHOLE);
        assert!(
            b.spend(answers_after(1000)).await.is_ok(),
            "ready at its deadline"
        );
        let started = std::cell::Cell::new(false);
        let next = b.within(async { started.set(true) }).await;
        assert!(ran_out(&next));
        assert!(!started.get(), "an operation started with no time left");
    }

    #[tokio::test(start_paused = true)]
    async fn an_error_back_is_the_servers_failure() {
        let mut b = Budget::new(WHOLE);
        let e = b
            .spend(async { Err::<(), _>(Step::Failed("busy".into())) })
            .await;
        assert!(matches!(e, Err(Step::Failed(why)) if why == "busy"));
    }
}
