<?php

declare(strict_types=1);

namespace Baton\Exception;

/**
 * SessionNotFoundException: the session is gone; it expired, was closed, or
 * belongs to another key (`404 session-not-found`). Its holds are gone with it.
 */
class SessionNotFoundException extends BatonException
{
}
