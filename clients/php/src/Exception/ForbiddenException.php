<?php

declare(strict_types=1);

namespace Baton\Exception;

/**
 * The API key may not do this to this lock (`403 forbidden`); the detail names the action and the lock. Never retried.
 */
class ForbiddenException extends BatonException
{
}
