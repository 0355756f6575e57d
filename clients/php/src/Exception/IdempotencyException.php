<?php

declare(strict_types=1);

namespace Baton\Exception;

/**
 * IdempotencyException: an Idempotency-Key was reused with another body
 * (`422 idempotency-key-mismatch`) or after what it made had ended
 * (`409 idempotency-key-used`). The client makes a new key for every new
 * request, so this means a bug, or a replay from elsewhere.
 */
class IdempotencyException extends BatonException
{
}
