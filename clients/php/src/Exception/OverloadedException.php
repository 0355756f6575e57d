<?php

declare(strict_types=1);

namespace Baton\Exception;

/**
 * OverloadedException: `503 overloaded`: Redis answers, but the server has
 * more calls to it waiting than its bounds allow, and did nothing. It is
 * retried as any 503 is; this is what is left once the retry budget ran out.
 */
class OverloadedException extends UnavailableException
{
}
