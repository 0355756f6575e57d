<?php

declare(strict_types=1);

namespace Baton\Exception;

/**
 * RateLimitedException: Baton refused for load (`429 rate-limited` or
 * `too-many-waiters`), and retrying within the client's retry budget did not
 * help. `retryAfter` says when to try again.
 */
class RateLimitedException extends BatonException
{
}
