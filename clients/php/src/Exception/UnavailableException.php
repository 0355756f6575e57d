<?php

declare(strict_types=1);

namespace Baton\Exception;

/**
 * UnavailableException: Baton (or a proxy in front of it) could not serve the
 * call (`503 store-unavailable` or `overloaded`, `502`, `504`), and retrying within the
 * client's retry budget did not help.
 */
class UnavailableException extends BatonException
{
}
