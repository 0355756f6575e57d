<?php

declare(strict_types=1);

namespace Baton\Exception;

/**
 * Baton wants a valid API key (`401 unauthorized`): none was sent, or it is unknown. Never retried.
 */
class UnauthorizedException extends BatonException
{
}
