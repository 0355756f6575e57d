<?php

declare(strict_types=1);

namespace Baton\Exception;

/**
 * LockHeldException: the lock was not granted within the wait (`423 lock-held`,
 * or a fair wait that ran out, after which the client left the queue). `owner`
 * and `ttl` describe the holder, `retryAfter` when it may be free.
 *
 * Also known as `Baton\LockHeldException`, the name CLIENTS.md uses: both names
 * are one class, so either may be caught.
 */
class LockHeldException extends BatonException
{
    /**
     * Live tickets queued for the lock, when the answer said.
     */
    public function waiters(): ?int
    {
        $waiters = $this->problem['waiters'] ?? null;

        return is_int($waiters) ? $waiters : null;
    }
}

class_alias(LockHeldException::class, 'Baton\LockHeldException');
