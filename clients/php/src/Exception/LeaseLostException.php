<?php

declare(strict_types=1);

namespace Baton\Exception;

/**
 * LeaseLostException: the hold is gone; its lease ran out, was released, or
 * was taken by force (`404 lease-not-held`). A lease that got this answer is
 * marked lost, and every later call on it throws this again.
 */
class LeaseLostException extends BatonException
{
}
