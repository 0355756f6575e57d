<?php

declare(strict_types=1);

namespace Baton\Exception;

/**
 * InvalidArgumentException: a call's arguments are wrong before anything is
 * sent (a negative duration, a limit without shared, a malformed URL).
 */
class InvalidArgumentException extends \InvalidArgumentException implements ExceptionInterface
{
}
